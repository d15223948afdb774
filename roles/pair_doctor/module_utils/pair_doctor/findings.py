"""A finding of the doctor: which check, on which host, how bad, what was seen, and the fix."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Severity(StrEnum):
    ERROR = "error"  # the service fails or silently degrades (e.g. NCCL over sockets)
    WARNING = "warning"  # a risk that bites on the next restart or reboot
    OK = "ok"
    SKIPPED = "skipped"  # the check cannot apply here; the reason says why


@dataclass(frozen=True)
class Finding:
    check: str
    host: str  # a host name, or "pair" for checks across both nodes
    severity: Severity
    summary: str
    fix: str = ""

    def line(self) -> str:
        text = f"[{self.severity.value.upper()}] {self.check} ({self.host}): {self.summary}"
        return f"{text}\n    fix: {self.fix}" if self.fix else text
