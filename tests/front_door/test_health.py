"""Active health checks: a pair whose /health or /v1/models fails is ejected within fall x
interval and put back after rise; a pair that dies or hangs with requests in flight has them
answered by the front door with an error, within about the check interval, never left hanging."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from tests.front_door.door import (
    CHECK_FALL,
    CHECK_INTERVAL_MS,
    CHECK_RISE,
    CLIENT_KEYS,
    Answer,
    FrontDoorUnderTest,
    wait_until,
)
from tests.front_door.doubles import PairDoubleServer

KEY = CLIENT_KEYS["dave"]
# A check every interval, each bounded by the check timeout (300 ms here), plus scheduling slack
# on a busy CI machine.
EJECT_WITHIN_S = CHECK_FALL * (CHECK_INTERVAL_MS + 300) / 1000 + 1.0
RETURN_WITHIN_S = CHECK_RISE * CHECK_INTERVAL_MS / 1000 + 1.0


def session_on(door: FrontDoorUnderTest, pair: str) -> str:
    """An affinity header value that the front door sends to `pair`."""
    for n in range(200):
        answer = door.complete(key=KEY, headers={"X-Session-Id": f"s{n}"}, max_tokens=1)
        if answer.json()["pair"] == pair:
            return f"s{n}"
    raise AssertionError(f"no session lands on {pair}")


def break_health(double: PairDoubleServer) -> None:
    double.health_status = 503


def break_models(double: PairDoubleServer) -> None:
    double.models_status = 500


def change_key(double: PairDoubleServer) -> None:
    # The pair restarted with another key than the one the front door sends.
    double.key = "another-key-" + "z" * 20


@pytest.mark.parametrize(
    "break_pair", [break_health, break_models, change_key], ids=["health", "models", "key"]
)
def test_a_failing_pair_is_ejected_and_put_back(
    door: FrontDoorUnderTest, break_pair: Callable[[PairDoubleServer], None]
) -> None:
    double = door.pairs["pair_one"]
    key = double.key
    break_pair(double)
    took = wait_until(
        lambda: door.states()["pair_one"].status == "DOWN", EJECT_WITHIN_S, "pair_one ejected"
    )
    assert took <= EJECT_WITHIN_S
    before = len(double.completions())
    answers = [door.complete(key=KEY, headers={"X-Session-Id": f"e{n}"}) for n in range(12)]
    assert {a.status for a in answers} == {200}
    assert "pair_one" not in {a.json()["pair"] for a in answers}
    assert len(double.completions()) == before
    double.heal()
    double.key = key
    wait_until(
        lambda: door.states()["pair_one"].status == "UP", RETURN_WITHIN_S, "pair_one put back"
    )


def test_the_check_status_says_which_check_failed(door: FrontDoorUnderTest) -> None:
    door.pairs["pair_two"].models_status = 500
    wait_until(lambda: door.states()["pair_two"].health == "DOWN", EJECT_WITHIN_S, "down")
    state = door.states()["pair_two"]
    assert state.check_status == "L7STS"
    assert state.check_code == "500"
    assert "/v1/models" in state.last_check


def in_flight(door: FrontDoorUnderTest, session: str, delay: float) -> Callable[[], Answer]:
    """Start a completion of `delay` seconds on the session's pair; returns its wait."""
    result: list[Answer | BaseException] = []

    def send() -> None:
        try:
            result.append(
                door.complete(key=KEY, headers={"X-Session-Id": session}, delay=delay, timeout=40)
            )
        except BaseException as error:  # the test says what happened
            result.append(error)

    thread = threading.Thread(target=send)
    thread.start()

    def wait() -> Answer:
        thread.join(timeout=45)
        assert not thread.is_alive(), "the request is still hanging"
        (answer,) = result
        assert isinstance(answer, Answer), answer
        return answer

    return wait


def test_requests_in_flight_on_a_pair_that_hangs_end_with_an_error_not_a_hang(
    door: FrontDoorUnderTest,
) -> None:
    double = door.pairs["pair_one"]
    session = session_on(door, "pair_one")
    waits = [in_flight(door, session, delay=25) for _ in range(2)]
    wait_until(lambda: double.in_flight == 2, 5, "two requests in flight on pair_one")
    hung_at = time.monotonic()
    double.hang()
    answers = [wait() for wait in waits]
    took = time.monotonic() - hung_at
    assert took < EJECT_WITHIN_S + 1, f"answered after {took:.1f} s"
    for answer in answers:
        assert answer.status in (502, 503), answer
        assert answer.json()["error"]["code"] == answer.status
    # The conversation goes on on another pair.
    assert door.complete(key=KEY, headers={"X-Session-Id": session}).status == 200


def test_requests_in_flight_on_a_pair_that_dies_end_with_an_error_and_new_ones_go_on(
    door: FrontDoorUnderTest,
) -> None:
    double = door.pairs["pair_two"]
    session = session_on(door, "pair_two")
    wait = in_flight(door, session, delay=25)
    wait_until(lambda: double.in_flight == 1, 5, "a request in flight on pair_two")
    killed_at = time.monotonic()
    double.kill()
    answer = wait()
    assert time.monotonic() - killed_at < EJECT_WITHIN_S
    assert answer.status in (502, 503), answer
    assert answer.json()["error"]["code"] == answer.status
    # Before the checks have seen it go, a new request finds the refused connection and tries
    # another pair.
    assert door.complete(key=KEY, headers={"X-Session-Id": session}).status == 200
    wait_until(lambda: door.states()["pair_two"].status == "DOWN", EJECT_WITHIN_S, "ejected")


def test_with_no_pair_left_the_front_door_answers_503_json(door: FrontDoorUnderTest) -> None:
    for double in door.pairs.values():
        double.health_status = 500
    wait_until(
        lambda: all(s.status == "DOWN" for s in door.states().values()),
        EJECT_WITHIN_S,
        "every pair down",
    )
    answer = door.complete(key=KEY)
    assert answer.status == 503
    assert answer.json()["error"]["code"] == 503
    port = int(door.variables["front_door_metrics_port"])
    assert door.request("/health", key=None, plain=True, port=port).status == 503
