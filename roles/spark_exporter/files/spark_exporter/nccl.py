"""Which transport NCCL reports, from its NCCL_DEBUG=INFO lines in a log file the exporter can
read: the last line that names one wins (``via NET/IB/0`` or ``via NET/Socket/0`` on a channel,
``NET/IB : Using [0]...`` or ``NET/Socket : Using [0]...``, ``Using network IB|Socket``), and
the last ``NCCL version 2.x.y+cuda...`` line gives the library's version.

The path may name a file, or a directory (NCCL_DEBUG_FILE's per-process files): then the newest
file in it is read. Only the file's last MAX_BYTES are read, so a long log costs a scrape little.
"""

from __future__ import annotations

import re
from pathlib import Path

from spark_exporter.exposition import Metrics
from spark_exporter.source import Report, Settings, SourceError

NAME = "nccl"
MAX_BYTES = 1 << 20
TRANSPORTS = ("ib", "socket", "unknown")
_SAYS = (
    re.compile(r"NCCL INFO Channel .* via NET/(IB|Socket)\b"),
    re.compile(r"NCCL INFO NET/(IB|Socket) ?: Using \["),
    re.compile(r"NCCL INFO Using network (IB|Socket)\b"),
)
_VERSION = re.compile(r"NCCL version (\S+)")


def configured(settings: Settings) -> bool:
    return settings.nccl_log is not None


def log_file(path: Path) -> Path:
    if path.is_dir():
        files = [p for p in path.iterdir() if p.is_file()]
        if not files:
            raise SourceError("not_found", f"{path}: no log file in it yet")
        return max(files, key=lambda p: p.stat().st_mtime)
    return path


def tail(path: Path) -> str:
    try:
        with path.open("rb") as stream:
            size = stream.seek(0, 2)
            stream.seek(max(0, size - MAX_BYTES))
            return stream.read().decode("utf-8", errors="replace")
    except FileNotFoundError as error:
        raise SourceError("not_found", f"{path}: {error}") from error
    except OSError as error:
        raise SourceError("unreadable", f"{path}: {error}") from error


def read(text: str) -> tuple[str, str | None]:
    """The transport the last line that names one says, and the last NCCL version seen."""
    transport, version = "unknown", None
    for line in text.splitlines():
        if "NCCL" not in line:
            continue
        for pattern in _SAYS:
            if match := pattern.search(line):
                transport = match[1].lower()
                break
        if match := _VERSION.search(line):
            version = match[1]
    return transport, version


def collect(settings: Settings, metrics: Metrics, report: Report) -> None:
    family = metrics.gauge(
        "spark_nccl_transport",
        "1 for the transport NCCL's log names last (ib, socket; unknown without a log line).",
    )
    transport, version = "unknown", None
    try:
        if settings.nccl_log is not None:
            transport, version = read(tail(log_file(settings.nccl_log)))
    finally:
        for name in TRANSPORTS:
            family.add(1 if name == transport else 0, transport=name)
    if version:
        metrics.gauge(
            "spark_nccl_version_info", "The NCCL version the service's log names last."
        ).add(1, version=version)
