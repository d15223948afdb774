"""Memory and swap from procfs meminfo, and the watchdog's floor beside them.

node_exporter exports the same (node_memory_*); these stand beside them so that the memory
watchdog's peer poll and the lab (whose node_exporter reads the real /proc) read one exporter."""

from __future__ import annotations

from pathlib import Path

from spark_exporter.exposition import Metrics
from spark_exporter.source import Report, Settings, SourceError, read_text

NAME = "memory"
KIB = 1024


def meminfo(procfs_root: Path) -> dict[str, int]:
    """meminfo's fields in bytes; SourceError when the file cannot be read or holds none."""
    path = procfs_root / "meminfo"
    try:
        text = read_text(path)
    except FileNotFoundError as error:
        raise SourceError("not_found", f"{path}: {error}") from error
    except OSError as error:
        raise SourceError("unreadable", f"{path}: {error}") from error
    fields: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        words = rest.split()
        if words and words[0].isdigit():
            unit = KIB if words[1:] == ["kB"] else 1
            fields[key.strip()] = int(words[0]) * unit
    if "MemAvailable" not in fields:
        raise SourceError("unparsable", f"{path}: no MemAvailable line")
    return fields


def configured(settings: Settings) -> bool:
    return True


def collect(settings: Settings, metrics: Metrics, report: Report) -> None:
    if settings.memory_floor_bytes > 0:
        metrics.gauge(
            "spark_memory_floor_bytes",
            "The memory watchdog's floor: MemAvailable under it for its samples drains the pair.",
        ).add(settings.memory_floor_bytes)
    fields = meminfo(settings.procfs_root)
    metrics.gauge(
        "spark_memory_available_bytes", "MemAvailable from meminfo (unified CPU and GPU memory)."
    ).add(fields["MemAvailable"])
    if "MemTotal" in fields:
        metrics.gauge("spark_memory_total_bytes", "MemTotal from meminfo.").add(fields["MemTotal"])
    if "SwapTotal" in fields and "SwapFree" in fields:
        metrics.gauge("spark_swap_total_bytes", "SwapTotal from meminfo.").add(fields["SwapTotal"])
        metrics.gauge("spark_swap_used_bytes", "SwapTotal - SwapFree from meminfo.").add(
            fields["SwapTotal"] - fields["SwapFree"]
        )
    else:
        report.fail("unparsable", f"{settings.procfs_root / 'meminfo'}: no SwapTotal or SwapFree")
