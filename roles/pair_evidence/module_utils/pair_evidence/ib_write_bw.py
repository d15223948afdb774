"""The bandwidth figure of perftest's ib_write_bw (run with --report_gbits)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

# "#bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]" data row.
_ROW = re.compile(
    r"^\s*(?P<bytes>\d+)\s+(?P<iters>\d+)\s+(?P<peak>[\d.]+)\s+(?P<avg>[\d.]+)\s+(?P<rate>[\d.]+)\s*$"
)
_UNIT = re.compile(r"BW average\[(?P<unit>[GM]B?b?/sec)\]", re.IGNORECASE)


@dataclass(frozen=True)
class IbWriteBw:
    message_bytes: int
    iterations: int
    peak_gbits: float
    average_gbits: float


class NoBandwidthRowError(ValueError):
    """ib_write_bw printed no result row (failed run, or not the client side)."""


def parse_ib_write_bw(lines: Iterable[str]) -> IbWriteBw:
    """Return the last result row in Gb/s; refuse MB/s output (run it with --report_gbits)."""
    unit: str | None = None
    found: IbWriteBw | None = None
    for raw in lines:
        if match := _UNIT.search(raw):
            unit = match["unit"]
        if match := _ROW.match(raw):
            found = IbWriteBw(
                message_bytes=int(match["bytes"]),
                iterations=int(match["iters"]),
                peak_gbits=float(match["peak"]),
                average_gbits=float(match["avg"]),
            )
    if found is None:
        raise NoBandwidthRowError("ib_write_bw printed no result row")
    if unit is not None and unit.lower() != "gb/sec":
        raise NoBandwidthRowError(f"ib_write_bw reported in {unit}; run it with --report_gbits")
    return found
