"""Each kind of evidence read from a tool's output into plain data (what the pair_evidence module
returns and the roles' judges read).

    nccl_log     NCCL's NCCL_DEBUG=INFO lines: the transport, its devices and the lines that say so
    allreduce    all_reduce_perf's table or the all-reduce script's lines: the rows and the figures
    ib_write_bw  ib_write_bw --report_gbits: the last result row
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict
from typing import Any

from .allreduce import parse_allreduce_output
from .ib_write_bw import parse_ib_write_bw
from .nccl_log import parse_nccl_log


def nccl_log_reading(lines: Iterable[str]) -> dict[str, Any]:
    report = parse_nccl_log(lines)
    return {**asdict(report), "transport": str(report.transport), "uses_rdma": report.uses_rdma}


def allreduce_reading(lines: Iterable[str]) -> dict[str, Any]:
    result = parse_allreduce_output(lines)
    return {
        **asdict(result),
        "peak_busbw_gbytes": result.peak_busbw_gbytes,
        "largest": asdict(result.largest),
        "wrong_total": result.wrong_total,
    }


def ib_write_bw_reading(lines: Iterable[str]) -> dict[str, Any]:
    return asdict(parse_ib_write_bw(lines))


# A reading that finds nothing to read raises a ValueError saying so.
READINGS: dict[str, Callable[[Iterable[str]], dict[str, Any]]] = {
    "nccl_log": nccl_log_reading,
    "allreduce": allreduce_reading,
    "ib_write_bw": ib_write_bw_reading,
}
