"""Parsers for the output of the RDMA tools the rail proof runs (ibv_devinfo, ib_write_bw)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

_ACTIVE_MTU = re.compile(r"^\s*active_mtu:\s*(\d+)", re.MULTILINE)


def ibv_active_mtu(devinfo: str) -> int | None:
    """active_mtu of the (single) port in `ibv_devinfo -d <dev> -i <port>` output."""
    match = _ACTIVE_MTU.search(devinfo)
    return int(match.group(1)) if match else None


def ib_write_bw_gbps(report: str) -> float | None:
    """BW average[Gb/sec] of an `ib_write_bw --report_gbits` run; None without a result row."""
    lines = report.splitlines()
    for number, line in enumerate(lines):
        if "BW average" not in line:
            continue
        columns = re.split(r"\s{2,}", line.strip())
        average = next(i for i, name in enumerate(columns) if name.startswith("BW average"))
        for row in lines[number + 1 :]:
            values = row.split()
            if len(values) == len(columns) and values[0].isdigit():
                return float(values[average])
    return None


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "rail_network_ibv_active_mtu": ibv_active_mtu,
            "rail_network_ib_write_bw_gbps": ib_write_bw_gbps,
        }
