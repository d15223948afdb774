"""The service's load-to-ready time, from the record vllm_tp2_service keeps on rank 0.

Its readiness gate writes {"pair", "started", "ready", "container_started"}: `started` is the
earlier of the two rank containers' starts, `ready` the moment rank 0 first answered /v1/models
(both RFC 3339, UTC), `container_started` each rank's start as docker gives it. A record whose
rank 0 start is not the running container's is of an earlier start, and is not reported.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

# Docker gives nanoseconds and drops trailing zeros; datetime holds microseconds.
_RFC3339_UTC = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?Z$")


class ReadyRecordError(ValueError):
    """The record is not one the readiness gate writes."""


@dataclass(frozen=True)
class LoadToReady:
    """How long the pair took from its containers' start to serving; a note where it is unknown."""

    started: datetime | None
    ready: datetime | None
    note: str = ""

    @property
    def seconds(self) -> float | None:
        if self.started is None or self.ready is None:
            return None
        return (self.ready - self.started).total_seconds()


def parse_utc(text: str) -> datetime:
    """An RFC 3339 time in UTC ('Z'), fractions of a second to any precision."""
    match = _RFC3339_UTC.match(text.strip())
    if not match:
        raise ReadyRecordError(f"{text!r} is not an RFC 3339 time in UTC")
    whole, fraction = match.groups()
    stamp = datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    return stamp.replace(microsecond=int((fraction or "0")[:6].ljust(6, "0")))


def parse_ready_record(data: Any, running_since: str = "") -> LoadToReady:
    """The load-to-ready of a record; running_since is rank 0's container start now ('' unknown)."""
    if not isinstance(data, dict):
        raise ReadyRecordError("not a JSON object")
    missing = [key for key in ("started", "ready") if not isinstance(data.get(key), str)]
    if missing:
        raise ReadyRecordError(f"missing {', '.join(missing)}")
    started, ready = parse_utc(data["started"]), parse_utc(data["ready"])
    if ready < started:
        raise ReadyRecordError(f"ready ({data['ready']}) before started ({data['started']})")
    containers = data.get("container_started")
    recorded = containers.get("0", "") if isinstance(containers, dict) else ""
    if not isinstance(recorded, str):
        raise ReadyRecordError("container_started of rank 0 is not a time")
    if running_since and recorded and parse_utc(recorded) != parse_utc(running_since):
        # Restarted since its gate last passed (by hand, or a run that stopped before the gate).
        return LoadToReady(
            None,
            None,
            f"the readiness record is of an earlier start (rank 0 started {recorded}; "
            f"its container now runs since {running_since})",
        )
    return LoadToReady(started, ready)


def load_to_ready(record: str, running_since: str = "") -> LoadToReady:
    """From the record's text ('' where rank 0 has none); never raises: the note says why not."""
    if not record.strip():
        return LoadToReady(None, None, "not recorded (rank 0 has no readiness record)")
    try:
        return parse_ready_record(json.loads(record), running_since)
    except (json.JSONDecodeError, ReadyRecordError) as error:
        return LoadToReady(None, None, f"unreadable readiness record: {error}")


def duration_text(seconds: float) -> str:
    """'252 s (4 min 12 s)'; under a minute just the seconds."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, rest = divmod(whole, 60)
    return f"{whole:,} s ({minutes} min {rest} s)"
