"""Evidence parsers on sample outputs of NCCL, nccl-tests, the all-reduce script, perftest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pair_evidence.allreduce import (
    NoAllReduceRowsError,
    bus_bandwidth,
    parse_allreduce_output,
)
from pair_evidence.ib_write_bw import NoBandwidthRowError, parse_ib_write_bw
from pair_evidence.nccl_log import Transport, parse_nccl_log

from tests.helpers import output_of
from tests.pair_evidence.module_play import run_module

SAMPLES = Path(__file__).with_name("samples")


def lines(name: str) -> list[str]:
    return (SAMPLES / name).read_text(encoding="utf-8").splitlines()


def test_ib_log_is_recognised_as_rdma() -> None:
    report = parse_nccl_log(lines("nccl_info_ib_sample.log"))
    assert report.transport is Transport.IB
    assert report.uses_rdma
    assert report.version == "2.27.7+cuda13.0"
    assert report.ib_devices == ("rocep1s0f1", "roceP2p1s0f1")
    assert report.ib_link_layers == ("RoCE", "RoCE")
    assert report.gid_index == 3
    assert report.channel_transports == ("IB",)
    assert any("via NET/IB/0" in line for line in report.evidence)


def test_socket_fallback_is_recognised_through_vllm_prefixes() -> None:
    report = parse_nccl_log(lines("nccl_info_socket_fallback_sample.log"))
    assert report.transport is Transport.SOCKET
    assert not report.uses_rdma
    assert report.socket_interfaces == ("enp1s0f1np1",)
    assert report.ib_devices == ()
    assert any("No device found" in line for line in report.evidence)
    assert report.warnings and "message truncated" in report.warnings[0]


def test_one_socket_channel_among_ib_channels_is_a_fallback() -> None:
    mixed = [
        *lines("nccl_info_ib_sample.log"),
        "h:1:2 [0] NCCL INFO Channel 02/0 : 0[0] -> 1[0] [send] via NET/Socket/0",
    ]
    assert parse_nccl_log(mixed).transport is Transport.SOCKET


def test_log_without_network_lines_is_unknown() -> None:
    report = parse_nccl_log(["NCCL INFO NCCL version 2.21.5+cuda12.4", "unrelated line"])
    assert report.transport is Transport.UNKNOWN
    assert report.version == "2.21.5+cuda12.4"


def test_single_node_p2p_channels_are_not_network() -> None:
    report = parse_nccl_log(["h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM"])
    assert report.transport is Transport.UNKNOWN
    assert report.channel_transports == ()


def test_all_reduce_perf_table_uses_in_place_columns() -> None:
    result = parse_allreduce_output(lines("all_reduce_perf_sample.txt"))
    assert result.source == "nccl-tests all_reduce_perf"
    assert len(result.rows) == 8
    assert result.rows[0].size_bytes == 8388608
    assert result.rows[0].busbw_gbytes == pytest.approx(13.71)
    assert result.largest.size_bytes == 1073741824
    assert result.largest.time_us == pytest.approx(63790)
    assert result.peak_busbw_gbytes == pytest.approx(16.83)
    assert result.avg_busbw_gbytes == pytest.approx(16.0919)
    assert result.wrong_total == 0


def test_all_reduce_perf_counts_wrong_results() -> None:
    row = (
        "     8388608       2097152     float     sum      -1"
        "    614.2   13.66   13.66      2    611.9   13.71   13.71      1"
    )
    assert parse_allreduce_output([row]).wrong_total == 3


def test_script_output_is_parsed_and_averaged() -> None:
    result = parse_allreduce_output(lines("allreduce_bench_script_sample.txt"))
    assert result.source == "torch.distributed all_reduce"
    assert [row.size_bytes for row in result.rows] == [8388608, 67108864, 536870912]
    assert result.largest.busbw_gbytes == pytest.approx(16.683)
    assert result.avg_busbw_gbytes == pytest.approx((13.105 + 16.325 + 16.683) / 3)


def test_output_without_rows_is_refused() -> None:
    with pytest.raises(NoAllReduceRowsError):
        parse_allreduce_output(["# nThread 1 nGpus 1", "NCCL WARN something failed"])


def test_bus_bandwidth_follows_nccl_tests_definition() -> None:
    algbw, busbw = bus_bandwidth(size_bytes=2_000_000_000, seconds=0.5, world_size=2)
    assert algbw == pytest.approx(4.0)
    assert busbw == pytest.approx(4.0)
    _, busbw_four = bus_bandwidth(size_bytes=2_000_000_000, seconds=0.5, world_size=4)
    assert busbw_four == pytest.approx(6.0)


def test_ib_write_bw_average() -> None:
    result = parse_ib_write_bw(lines("ib_write_bw_sample.txt"))
    assert result.message_bytes == 65536
    assert result.iterations == 5000
    assert result.peak_gbits == pytest.approx(92.41)
    assert result.average_gbits == pytest.approx(92.38)


def test_ib_write_bw_repeated_rows_give_the_last() -> None:
    """A run reporting every interval (as NVIDIA's two-Spark guide shows, peak not measured)."""
    rows = [
        " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]",
        " 65536      927940           0.00               97.28                0.185548",
        " 65536      927790           0.00               97.27                0.185549",
        " 65536      927766           0.00               97.29                0.185550",
    ]
    result = parse_ib_write_bw(rows)
    assert result.average_gbits == pytest.approx(97.29)
    assert result.peak_gbits == 0.0


def test_ib_write_bw_in_megabytes_is_refused() -> None:
    text = [line.replace("Gb/sec", "MB/sec") for line in lines("ib_write_bw_sample.txt")]
    with pytest.raises(NoBandwidthRowError, match="report_gbits"):
        parse_ib_write_bw(text)


def test_ib_write_bw_failure_is_refused() -> None:
    with pytest.raises(NoBandwidthRowError):
        parse_ib_write_bw([" Couldn't connect to 192.168.100.11:18515"])


def read_in_a_play(tmp_path: Path, kind: str, text: str) -> tuple[int, str, dict[str, Any]]:
    """Run the role's module on ``text`` as a role would; its result, if it gave one."""
    result, returned = run_module(tmp_path, "pair_evidence", {"kind": kind, "text": text})
    return result.returncode, output_of(result), returned.get("reading", {})


def test_the_module_reads_a_socket_fallback(tmp_path: Path) -> None:
    text = (SAMPLES / "nccl_info_socket_fallback_sample.log").read_text(encoding="utf-8")
    code, output, reading = read_in_a_play(tmp_path, "nccl_log", text)
    assert code == 0, output
    assert reading["transport"] == "Socket"
    assert reading["uses_rdma"] is False


def test_the_module_fails_without_rows(tmp_path: Path) -> None:
    code, output, reading = read_in_a_play(tmp_path, "allreduce", "nothing here\n")
    assert code != 0
    assert "no all-reduce rows in the output" in output
    assert reading == {}
