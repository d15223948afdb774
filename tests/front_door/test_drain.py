"""front_door_ctl.py's drain, restore, wait-up and status on the real HAProxy, and the gate
listener that reaches a drained pair."""

from __future__ import annotations

import json
import time

from tests.front_door.door import (
    CLIENT_KEYS,
    PAIR_KEYS,
    FrontDoorUnderTest,
    wait_until,
)
from tests.front_door.test_health import EJECT_WITHIN_S, in_flight, session_on

KEY = CLIENT_KEYS["judy"]


def test_status_reports_every_pair(door: FrontDoorUnderTest) -> None:
    result = door.ctl("status")
    assert result.returncode == 0, result.stderr
    pairs = json.loads(result.stdout)["pairs"]
    assert [pair["name"] for pair in pairs] == sorted(door.pairs)
    for pair in pairs:
        assert pair["status"] == "UP"
        assert pair["health"] == "UP"
        assert pair["check_status"] == "L7OK"
        assert pair["sessions"] == 0


def test_drain_waits_for_requests_in_flight_then_no_new_request_reaches_the_pair(
    door: FrontDoorUnderTest,
) -> None:
    double = door.pairs["pair_one"]
    session = session_on(door, "pair_one")
    wait = in_flight(door, session, delay=1.5)
    wait_until(lambda: double.in_flight == 1, 5, "a request in flight on pair_one")
    started = time.monotonic()
    drained = door.ctl("drain", "pair_one", "--timeout", "20", "--interval", "0.1")
    assert drained.returncode == 0, drained.stderr
    assert time.monotonic() - started >= 1.0  # it waited for the request
    assert "pair_one: drained, no request in flight" in drained.stdout
    answer = wait()
    assert (answer.status, answer.json()["pair"]) == (200, "pair_one")
    assert door.states()["pair_one"].status == "MAINT"
    before = len(double.completions())
    # Its own conversation included: everything goes elsewhere while it is drained.
    answers = [door.complete(key=KEY, headers={"X-Session-Id": session})]
    answers += [door.complete(key=KEY, headers={"X-Session-Id": f"d{n}"}) for n in range(10)]
    assert {a.status for a in answers} == {200}
    assert "pair_one" not in {a.json()["pair"] for a in answers}
    assert len(double.completions()) == before
    again = door.ctl("drain", "pair_one", "--timeout", "5")
    assert "already in maintenance" in again.stdout
    restored = door.ctl("restore", "pair_one", "--timeout", "10", "--interval", "0.1")
    assert restored.returncode == 0, restored.stderr
    assert "pair_one: UP and taking requests" in restored.stdout
    assert door.complete(key=KEY, headers={"X-Session-Id": session}).json()["pair"] == "pair_one"
    assert "already taking requests" in door.ctl("restore", "pair_one").stdout


def test_drain_times_out_saying_how_many_requests_are_still_in_flight(
    door: FrontDoorUnderTest,
) -> None:
    double = door.pairs["pair_two"]
    session = session_on(door, "pair_two")
    wait = in_flight(door, session, delay=2)
    wait_until(lambda: double.in_flight == 1, 5, "a request in flight on pair_two")
    drained = door.ctl("drain", "pair_two", "--timeout", "0.5", "--interval", "0.1")
    assert drained.returncode == 1
    assert "pair_two: 1 request(s) still in flight after 0.5 s" in drained.stderr
    assert "stays in maintenance" in drained.stderr
    assert door.states()["pair_two"].status == "MAINT"
    assert wait().status == 200  # the drain cut nothing


def test_restore_waits_for_the_checks_and_fails_with_their_status(
    door: FrontDoorUnderTest,
) -> None:
    double = door.pairs["pair_three"]
    assert door.ctl("drain", "pair_three", "--timeout", "5").returncode == 0
    double.models_status = 503
    wait_until(lambda: door.states()["pair_three"].health == "DOWN", EJECT_WITHIN_S, "down")
    refused = door.ctl("restore", "pair_three", "--timeout", "1", "--interval", "0.1")
    assert refused.returncode == 1
    assert "pair_three: not UP after 1 s" in refused.stderr
    assert "L7STS" in refused.stderr
    assert "code 503" in refused.stderr
    assert "/v1/models" in refused.stderr
    double.heal()
    restored = door.ctl("restore", "pair_three", "--timeout", "10", "--interval", "0.1")
    assert restored.returncode == 0, restored.stderr


def test_wait_up_follows_the_checks_whatever_the_drain(door: FrontDoorUnderTest) -> None:
    assert door.ctl("drain", "pair_one", "--timeout", "5").returncode == 0
    assert door.ctl("wait-up", "pair_one", "--timeout", "5").returncode == 0
    door.pairs["pair_one"].health_status = 500
    wait_until(lambda: door.states()["pair_one"].health == "DOWN", EJECT_WITHIN_S, "down")
    waited = door.ctl("wait-up", "pair_one", "--timeout", "0.5", "--interval", "0.1")
    assert waited.returncode == 1
    assert "pair_one: checks not passing after 0.5 s: DOWN, last check L7STS" in waited.stderr
    assert "/health" in waited.stderr


def test_an_unknown_pair_is_named_with_the_known_ones(door: FrontDoorUnderTest) -> None:
    result = door.ctl("drain", "pair_nine", "--timeout", "1")
    assert result.returncode == 1
    assert "no pair 'pair_nine' at the front door (pairs: pair_one, pair_three, pair_two)" in (
        result.stderr
    )


def test_the_gate_reaches_a_drained_pair_by_header_with_a_front_door_key(
    door: FrontDoorUnderTest,
) -> None:
    double = door.pairs["pair_two"]
    assert door.ctl("drain", "pair_two", "--timeout", "5").returncode == 0
    answer = door.gate("pair_two", body={"model": "m", "prompt": "2 + 2 ="})
    assert (answer.status, answer.json()["pair"]) == (200, "pair_two")
    assert double.completions()[-1].authorization == f"Bearer {PAIR_KEYS['pair_two']}"
    assert double.completions()[-1].body["prompt"] == "2 + 2 ="
    # Each pair by its name, whatever the affinity.
    for name in door.pairs:
        assert door.gate(name).json()["pair"] == name
    refused = door.gate("pair_two", key="wrong-key-" + "w" * 20)
    assert refused.status == 401
    assert refused.json()["error"]["code"] == 401
    assert door.gate("pair_two", key=PAIR_KEYS["pair_two"]).status == 401
    unknown = door.gate("pair_nine")
    assert unknown.status == 404
    assert "X-Dualspark-Pair" in unknown.json()["error"]["message"]
    assert door.gate(None).status == 404
    door.log.wait_for(lambda line: "gate key=gatekeeper pair=pair_two status=200" in line)
    # The public listener does not route by the header.
    public = [
        door.complete(key=KEY, headers={"X-Dualspark-Pair": "pair_two", "X-Session-Id": f"g{n}"})
        for n in range(6)
    ]
    assert "pair_two" not in {a.json()["pair"] for a in public}
