"""pair_validate's all-reduce script, run for real as two gloo ranks here (no GPU needed)."""

from __future__ import annotations

import socket
import subprocess
import sys

from pair_evidence.allreduce import parse_allreduce_output

from tests.helpers import REPO

SCRIPT = REPO / "roles/pair_validate/files/allreduce_bench.py"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_two_ranks_reduce_correctly_and_report_in_the_parsed_format() -> None:
    port = str(free_port())
    common = [
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        port,
        "--world-size",
        "2",
        "--sizes-mib",
        "0.25",
        "1",
        "--warmup",
        "1",
        "--iters",
        "3",
        "--dtype",
        "float32",
        "--timeout-s",
        "60",
    ]
    ranks = [
        subprocess.Popen(
            [sys.executable, str(SCRIPT), "--rank", str(rank), *common],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [rank.communicate(timeout=120) for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 0], outputs
    rank0_out = outputs[0][0]
    assert "backend gloo" in rank0_out
    assert outputs[1][0] == ""  # only rank 0 reports
    result = parse_allreduce_output(rank0_out.splitlines())
    assert result.source == "torch.distributed all_reduce"
    assert [row.size_bytes for row in result.rows] == [262144, 1048576]
    assert result.wrong_total == 0
    assert all(row.time_us > 0 and row.busbw_gbytes > 0 for row in result.rows)
    # busbw = algbw * 2(n-1)/n, which is algbw itself for two ranks
    assert all(abs(row.busbw_gbytes - row.algbw_gbytes) < 1e-3 for row in result.rows)
