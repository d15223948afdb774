"""What every source shares: the exporter's settings, and how a source says it could not read.

A source that cannot read at all raises SourceError; one that reads part of what it should calls
``Report.fail`` and goes on. Either way the scrape answers, and ``spark_exporter_source_up`` says
which source failed, ``spark_exporter_source_error_info`` why (a word from REASONS)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# Why a source did not answer: a short, fixed vocabulary (a label value), details in the journal.
REASONS = ("not_found", "unreadable", "timeout", "failed", "unparsable", "error")


@dataclass(frozen=True)
class Settings:
    """What the exporter reads, from its command line."""

    sysfs_root: Path = Path("/sys")
    procfs_root: Path = Path("/proc")
    nvidia_smi: str = "/usr/bin/nvidia-smi"
    nvidia_smi_timeout_s: float = 5.0
    twins: tuple[str, ...] = ()
    expected_mtu: int = 0
    nccl_log: Path | None = None
    overlay_stats_dir: Path | None = None
    overlay_dir: Path | None = None
    tls_certificate: Path | None = None
    memory_floor_bytes: int = 0


class SourceError(Exception):
    """The source could not be read at all."""

    def __init__(self, reason: str, detail: str) -> None:
        if reason not in REASONS:
            raise ValueError(f"unknown reason {reason!r}")
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


@dataclass
class Report:
    """The problems one source met in one scrape; the first names the reason."""

    problems: list[tuple[str, str]] = field(default_factory=list)

    def fail(self, reason: str, detail: str) -> None:
        if reason not in REASONS:
            raise ValueError(f"unknown reason {reason!r}")
        self.problems.append((reason, detail))


def read_text(path: Path) -> str:
    """A small sysfs or procfs file, stripped; OSError when it cannot be read."""
    return path.read_text(encoding="utf-8", errors="replace").strip()
