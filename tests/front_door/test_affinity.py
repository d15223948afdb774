"""Conversations stay on one pair while it is healthy (the affinity header, else the body's
`user`), by consistent hashing: a pair that leaves moves only its own conversations."""

from __future__ import annotations

from collections import Counter

import front_door_ctl

from tests.front_door.door import CLIENT_KEYS as KEYS
from tests.front_door.door import FrontDoorUnderTest


def pair_by_header(door: FrontDoorUnderTest, session: str, key: str) -> str:
    answer = door.complete(key=key, headers={"X-Session-Id": session})
    assert answer.status == 200
    return str(answer.json()["pair"])


def pair_by_user(door: FrontDoorUnderTest, user: str, key: str) -> str:
    answer = door.complete(key=key, user=user)
    assert answer.status == 200
    return str(answer.json()["pair"])


def test_one_conversation_by_header_stays_on_one_pair_and_others_spread(
    door: FrontDoorUnderTest,
) -> None:
    sessions = [f"conversation-{n}" for n in range(12)]
    placed = {session: pair_by_header(door, session, KEYS["bob"]) for session in sessions}
    for session in sessions[:3]:
        assert {pair_by_header(door, session, KEYS["bob"]) for _ in range(5)} == {placed[session]}
    assert len(set(placed.values())) > 1


def test_the_user_field_keeps_a_conversation_when_the_header_is_absent(
    door: FrontDoorUnderTest,
) -> None:
    users = [f"user-{n}" for n in range(12)]
    placed = {user: pair_by_user(door, user, KEYS["frank"]) for user in users}
    for user in users[:3]:
        assert {pair_by_user(door, user, KEYS["frank"]) for _ in range(5)} == {placed[user]}
    assert len(set(placed.values())) > 1


def test_the_header_wins_over_the_user_field(door: FrontDoorUnderTest) -> None:
    # A header and users that land on the other pair: the header decides.
    header_pair = pair_by_header(door, "by-header", KEYS["grace"])
    other_users = [
        u
        for u in (f"u{n}" for n in range(30))
        if pair_by_user(door, u, KEYS["grace"]) != header_pair
    ]
    for user in other_users[:3]:
        answer = door.complete(key=KEYS["grace"], user=user, headers={"X-Session-Id": "by-header"})
        assert answer.json()["pair"] == header_pair


def test_without_a_conversation_requests_go_round_robin(door: FrontDoorUnderTest) -> None:
    pairs = Counter(door.complete(key=KEYS["heidi"]).json()["pair"] for _ in range(9))
    assert set(pairs) == set(door.pairs)


def test_a_pair_that_leaves_moves_only_its_own_conversations(door: FrontDoorUnderTest) -> None:
    sessions = [f"moving-{n}" for n in range(24)]
    before = {session: pair_by_header(door, session, KEYS["ivan"]) for session in sessions}
    assert set(before.values()) == set(door.pairs)
    admin = front_door_ctl.FrontDoor(door.socket)
    admin.set_state("pair_two", "maint")
    during = {session: pair_by_header(door, session, KEYS["ivan"]) for session in sessions}
    assert "pair_two" not in during.values()
    stayed = {s: p for s, p in before.items() if p != "pair_two"}
    assert {s: during[s] for s in stayed} == stayed
    admin.set_state("pair_two", "ready")
    door.wait_all_up()
    after = {session: pair_by_header(door, session, KEYS["ivan"]) for session in sessions}
    assert after == before
