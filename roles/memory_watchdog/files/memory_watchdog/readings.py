"""What the watchdog reads: this box's MemAvailable from procfs, and the peer's from its spark
exporter's exposition (``spark_memory_available_bytes``, and its floor
``spark_memory_floor_bytes`` when it exports one)."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

KIB = 1024
_SAMPLE = re.compile(r"^(spark_memory_available_bytes|spark_memory_floor_bytes)(?:\{\})? (\S+)")


def local_available(procfs_root: Path) -> int | None:
    """MemAvailable in bytes, or None when meminfo cannot be read or holds no such line."""
    try:
        text = (procfs_root / "meminfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key == "MemAvailable":
            words = rest.split()
            if words and words[0].isdigit():
                return int(words[0]) * (KIB if words[1:] == ["kB"] else 1)
    return None


@dataclass(frozen=True)
class PeerReading:
    """The peer's MemAvailable and floor as its exporter gave them; None where it did not."""

    available: int | None
    floor: int | None
    error: str = ""


def parse_exposition(text: str) -> PeerReading:
    values: dict[str, float] = {}
    for line in text.splitlines():
        if match := _SAMPLE.match(line):
            try:
                values[match[1]] = float(match[2])
            except ValueError:
                continue
    available = values.get("spark_memory_available_bytes")
    floor = values.get("spark_memory_floor_bytes")
    return PeerReading(
        available=None if available is None else int(available),
        floor=None if floor is None else int(floor),
        error="" if available is not None else "no spark_memory_available_bytes in the answer",
    )


def peer(url: str, timeout_s: float) -> PeerReading:
    """The peer's reading; an unreachable or silent peer gives a reading of None, with why."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            text = answer.read(1 << 20).decode("utf-8", errors="replace")
    except (urllib.error.URLError, OSError, ValueError) as error:
        return PeerReading(None, None, f"{url}: {error}")
    return parse_exposition(text)
