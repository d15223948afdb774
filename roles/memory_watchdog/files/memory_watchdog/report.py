"""The watchdog's state where others read it: a JSON state file, and a ``.prom`` file in
node_exporter's textfile directory. Both are replaced whole (a rename), when the state changes or
at least every HEARTBEAT_S."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from memory_watchdog.guard import Guard

TEXTFILE = "spark_memory_watchdog.prom"
HEARTBEAT_S = 15.0


def number(value: float) -> str:
    """A sample's value as the text format writes it, at full precision."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def state_of(guard: Guard, peer_configured: bool, peer_up: bool) -> dict[str, Any]:
    return {
        "armed": guard.armed,
        "drained": not guard.armed and bool(guard.drain.command),
        "draining": guard.drain.running,
        "drains": guard.drains,
        "drain_exit_code": guard.drain.exit_code,
        "floor_bytes": guard.floor,
        "samples": guard.samples,
        "low": {box: guard.low(box) for box in guard.streaks},
        "available_bytes": {box: streak.last for box, streak in guard.streaks.items()},
        "peer_up": peer_up if peer_configured else None,
    }


def exposition(state: dict[str, Any], drained_at: float | None, now: float) -> str:
    lines: list[str] = []

    def family(name: str, kind: str, text: str, samples: list[tuple[str, float]]) -> None:
        lines.extend([f"# HELP {name} {text}", f"# TYPE {name} {kind}"])
        lines.extend(f"{name}{labels} {number(value)}" for labels, value in samples)

    family(
        "spark_memory_watchdog_drained",
        "gauge",
        "1 once this watchdog ran its drain command, until it re-arms.",
        [("", 1 if state["drained"] else 0)],
    )
    family(
        "spark_memory_watchdog_armed",
        "gauge",
        "1 while the watchdog would drain on a low streak.",
        [("", 1 if state["armed"] else 0)],
    )
    family(
        "spark_memory_watchdog_draining",
        "gauge",
        "1 while the drain command runs.",
        [("", 1 if state["draining"] else 0)],
    )
    family(
        "spark_memory_watchdog_drains_total",
        "counter",
        "Drain commands run since the watchdog started.",
        [("", state["drains"])],
    )
    if state["drain_exit_code"] is not None:
        family(
            "spark_memory_watchdog_drain_failed",
            "gauge",
            "1 when the last drain command failed.",
            [("", 0 if state["drain_exit_code"] == 0 else 1)],
        )
    if drained_at is not None:
        family(
            "spark_memory_watchdog_last_drain_timestamp_seconds",
            "gauge",
            "When the watchdog last fired (Unix time).",
            [("", drained_at)],
        )
    family(
        "spark_memory_watchdog_low",
        "gauge",
        "1 while the box has been under the floor for the watchdog's samples.",
        [(f'{{box="{box}"}}', 1 if low else 0) for box, low in state["low"].items()],
    )
    if state["peer_up"] is not None:
        family(
            "spark_memory_watchdog_peer_up",
            "gauge",
            "1 when the peer's exporter answered the last poll.",
            [("", 1 if state["peer_up"] else 0)],
        )
    family(
        "spark_memory_watchdog_heartbeat_timestamp_seconds",
        "gauge",
        "When the watchdog last wrote this file (Unix time).",
        [("", now)],
    )
    return "\n".join(lines) + "\n"


def replace(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        temporary.write_text(text, encoding="utf-8")
        temporary.chmod(0o644)
        temporary.replace(path)
    except OSError:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise


class Writer:
    """Writes the state file and the textfile when the state changed or a heartbeat is due."""

    def __init__(self, state_file: Path | None, textfile_dir: Path | None) -> None:
        self.state_file = state_file
        self.textfile_dir = textfile_dir
        self._written: dict[str, Any] | None = None
        self._written_at = float("-inf")

    def write(self, state: dict[str, Any], drained_at: float | None, now: float) -> bool:
        if state == self._written and now - self._written_at < HEARTBEAT_S:
            return False
        if self.state_file is not None:
            replace(self.state_file, json.dumps({**state, "written": now}, sort_keys=True) + "\n")
        if self.textfile_dir is not None:
            replace(self.textfile_dir / TEXTFILE, exposition(state, drained_at, now))
        self._written, self._written_at = state, now
        return True
