"""All-reduce figures from nccl-tests' all_reduce_perf or from the shipped torch.distributed script.

Both give, per message size, the time and the bus bandwidth (nccl-tests' definition for all-reduce:
algbw * 2(n-1)/n), so the two sources compare directly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

# A data row of all_reduce_perf: size count type redop root, then out-of-place and in-place
# (time algbw busbw #wrong) each.
_PERF_ROW = re.compile(
    r"^\s*(?P<size>\d+)\s+(?P<count>\d+)\s+(?P<dtype>\w+)\s+(?P<redop>\w+)\s+(?P<root>-?\d+)"
    r"\s+(?P<oop_time>[\d.]+)\s+(?P<oop_algbw>[\d.]+)\s+(?P<oop_busbw>[\d.]+)\s+(?P<oop_wrong>\S+)"
    r"\s+(?P<ip_time>[\d.]+)\s+(?P<ip_algbw>[\d.]+)\s+(?P<ip_busbw>[\d.]+)\s+(?P<ip_wrong>\S+)\s*$"
)
_AVG_BUSBW = re.compile(r"#\s*Avg bus bandwidth\s*:\s*(?P<value>[\d.]+)")
# The torch.distributed script prints one JSON object per size behind this tag.
SCRIPT_TAG = "ALLREDUCE_RESULT "


@dataclass(frozen=True)
class AllReduceRow:
    size_bytes: int
    time_us: float
    algbw_gbytes: float
    busbw_gbytes: float
    wrong: int


@dataclass(frozen=True)
class AllReduceResult:
    """The measured rows and the figure quoted for the pair: bus bandwidth at the largest size."""

    source: str
    rows: tuple[AllReduceRow, ...]
    avg_busbw_gbytes: float | None

    @property
    def peak_busbw_gbytes(self) -> float:
        return max(row.busbw_gbytes for row in self.rows)

    @property
    def largest(self) -> AllReduceRow:
        return max(self.rows, key=lambda row: row.size_bytes)

    @property
    def wrong_total(self) -> int:
        return sum(row.wrong for row in self.rows)


class NoAllReduceRowsError(ValueError):
    """The output held no all-reduce measurement."""


def bus_bandwidth(size_bytes: int, seconds: float, world_size: int) -> tuple[float, float]:
    """Return (algbw, busbw) in GB/s (10^9 bytes) for one all-reduce of size_bytes."""
    algbw = size_bytes / seconds / 1e9
    return algbw, algbw * 2 * (world_size - 1) / world_size


def parse_allreduce_output(lines: Iterable[str]) -> AllReduceResult:
    """Parse all_reduce_perf's table or the script's tagged JSON lines, whichever is present."""
    perf_rows: list[AllReduceRow] = []
    script_rows: list[AllReduceRow] = []
    avg: float | None = None
    for raw in lines:
        line = raw.rstrip("\n")
        if SCRIPT_TAG in line:
            record = json.loads(line.split(SCRIPT_TAG, 1)[1])
            script_rows.append(
                AllReduceRow(
                    size_bytes=int(record["size_bytes"]),
                    time_us=float(record["time_us"]),
                    algbw_gbytes=float(record["algbw_gbytes"]),
                    busbw_gbytes=float(record["busbw_gbytes"]),
                    wrong=int(record.get("wrong", 0)),
                )
            )
        elif match := _PERF_ROW.match(line):
            # The in-place columns are quoted: vLLM's all-reduces are in place.
            perf_rows.append(
                AllReduceRow(
                    size_bytes=int(match["size"]),
                    time_us=float(match["ip_time"]),
                    algbw_gbytes=float(match["ip_algbw"]),
                    busbw_gbytes=float(match["ip_busbw"]),
                    wrong=_wrong(match["ip_wrong"]) + _wrong(match["oop_wrong"]),
                )
            )
        elif match := _AVG_BUSBW.search(line):
            avg = float(match["value"])
    if perf_rows:
        return AllReduceResult("nccl-tests all_reduce_perf", tuple(perf_rows), avg)
    if script_rows:
        mean = sum(row.busbw_gbytes for row in script_rows) / len(script_rows)
        return AllReduceResult("torch.distributed all_reduce", tuple(script_rows), mean)
    raise NoAllReduceRowsError(
        "no all-reduce rows in the output (neither all_reduce_perf nor the script)"
    )


def _wrong(text: str) -> int:
    # all_reduce_perf prints N/A for #wrong when checking is off (-c 0).
    return int(text) if text.isdigit() else 0
