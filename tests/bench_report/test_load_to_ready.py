"""The service's load to ready, from the record vllm_tp2_service's readiness gate keeps on rank 0
(tests/service/test_ready_record.py writes one with the role's own tasks)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from pair_benchmark.load_to_ready import (
    ReadyRecordError,
    duration_text,
    load_to_ready,
    parse_utc,
)

RANK0 = "2025-06-01T10:00:31.123456789Z"
RECORD = {
    "pair": "pair_one",
    "started": "2025-06-01T10:00:00Z",
    "ready": "2025-06-01T10:04:12Z",
    "container_started": {"0": RANK0, "1": "2025-06-01T10:00:00.25Z"},
}


def test_docker_times_are_read_to_the_microsecond() -> None:
    assert parse_utc(RANK0) == datetime(2025, 6, 1, 10, 0, 31, 123456, tzinfo=UTC)
    assert parse_utc("2025-06-01T10:00:00.25Z").microsecond == 250000
    assert parse_utc("2025-06-01T10:00:00Z") == datetime(2025, 6, 1, 10, tzinfo=UTC)
    with pytest.raises(ReadyRecordError):
        parse_utc("2025-06-01 10:00:00")  # no zone: not a time to compare across nodes


def test_load_to_ready_runs_from_the_earlier_start_to_the_first_answer() -> None:
    load = load_to_ready(json.dumps(RECORD), running_since=RANK0)
    assert load.seconds == 252
    assert load.started == datetime(2025, 6, 1, 10, tzinfo=UTC)
    assert load.note == ""
    # Where rank 0's container start is not known, the record is taken as it is.
    assert load_to_ready(json.dumps(RECORD)).seconds == 252


def test_a_record_of_an_earlier_start_is_not_reported() -> None:
    load = load_to_ready(json.dumps(RECORD), running_since="2025-06-02T08:00:05.5Z")
    assert load.seconds is None
    assert "of an earlier start" in load.note and RANK0 in load.note


def test_the_same_start_to_another_precision_is_the_same_start() -> None:
    assert load_to_ready(json.dumps(RECORD), "2025-06-01T10:00:31.1234567Z").seconds == 252


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "not recorded"),
        ("{", "unreadable readiness record"),
        (json.dumps({"started": "2025-06-01T10:00:00Z"}), "missing ready"),
        (json.dumps({**RECORD, "ready": "2025-06-01T09:59:00Z"}), "before started"),
        (json.dumps({**RECORD, "ready": "soon"}), "not an RFC 3339 time"),
    ],
)
def test_no_usable_record_says_why(text: str, says: str) -> None:
    load = load_to_ready(text, RANK0)
    assert load.seconds is None
    assert says in load.note


def test_durations_read_as_a_person_says_them() -> None:
    assert duration_text(252) == "252 s (4 min 12 s)"
    assert duration_text(3725.4) == "3,725 s (62 min 5 s)"
    assert duration_text(42.4) == "42 s"
