"""The watchdog's decision on a made-up clock: streaks, one drain, re-arming, a silent peer."""

from __future__ import annotations

from memory_watchdog.guard import Drain, Guard

GIB = 1 << 30
FLOOR = 5 * GIB
HIGH, LOW = 100 * GIB, 4 * GIB


class DrainDouble(Drain):
    """Stands for the drain command: records when it was started, finishes when told to."""

    def __init__(self, command: list[str] | None = None) -> None:
        super().__init__(["drain-double"] if command is None else command, timeout_s=60)
        self.started: list[float] = []
        self._busy = False

    @property
    def running(self) -> bool:
        return self._busy

    def start(self, now: float) -> None:
        self.started.append(now)
        self._busy = bool(self.command)

    def poll(self, now: float) -> None:
        pass

    def finish(self, code: int = 0) -> None:
        self._busy, self.exit_code = False, code


def guard(drain: Drain | None = None, samples: int = 3, holdoff_s: float = 10) -> Guard:
    return Guard(FLOOR, samples, holdoff_s, drain or DrainDouble())


def feed(watch: Guard, start: float, values: list[int | None], box: str = "self") -> float:
    now = start
    for value in values:
        watch.step(now, {box: value}, {box: FLOOR})
        now += 1
    return now


def test_a_dip_shorter_than_the_samples_does_not_drain() -> None:
    drain = DrainDouble()
    watch = guard(drain)
    feed(watch, 0, [HIGH, LOW, LOW, HIGH, LOW, LOW, HIGH])
    assert drain.started == []
    assert watch.armed


def test_a_streak_of_samples_under_the_floor_drains_once() -> None:
    drain = DrainDouble()
    watch = guard(drain)
    feed(watch, 0, [HIGH, LOW, LOW, LOW, LOW, LOW, LOW])
    assert drain.started == [3], "on the third low sample, not before, and only once"
    assert watch.drains == 1
    assert watch.low("self")
    assert not watch.armed


def test_the_floor_itself_is_not_low() -> None:
    drain = DrainDouble()
    feed(guard(drain), 0, [FLOOR] * 5)
    assert drain.started == []


def test_it_re_arms_only_after_recovery_and_the_hold_off() -> None:
    drain = DrainDouble()
    watch = guard(drain, holdoff_s=10)
    now = feed(watch, 0, [LOW, LOW, LOW])  # drains at 2
    drain.finish()
    now = feed(watch, now, [HIGH, HIGH, HIGH, LOW, LOW, LOW])  # recovered, but within the hold-off
    assert drain.started == [2]
    assert not watch.armed
    now = feed(watch, now, [HIGH] * 4)  # 13: hold-off over, and three high samples
    assert watch.armed
    feed(watch, now, [LOW, LOW, LOW])
    assert drain.started == [2, now + 2]


def test_it_does_not_re_arm_while_the_drain_still_runs() -> None:
    drain = DrainDouble()
    watch = guard(drain, holdoff_s=0)
    feed(watch, 0, [LOW, LOW, LOW] + [HIGH] * 5)
    assert drain.running and not watch.armed


def test_a_missing_reading_neither_extends_nor_ends_a_streak() -> None:
    drain = DrainDouble()
    watch = guard(drain)
    feed(watch, 0, [LOW, None, LOW, None, None], box="peer")
    assert drain.started == []
    feed(watch, 5, [LOW], box="peer")
    assert drain.started == [5], "a box that was low and fell silent drains on its next low reading"
    watch = guard(drain2 := DrainDouble())
    feed(watch, 0, [None] * 10, box="peer")
    assert drain2.started == [], "a silent peer alone never drains"


def test_either_box_low_drains_the_pair() -> None:
    drain = DrainDouble()
    watch = guard(drain)
    for now in range(3):
        watch.step(now, {"self": HIGH, "peer": LOW}, {"self": FLOOR, "peer": FLOOR})
    assert drain.started == [2]
    assert watch.low("peer") and not watch.low("self")


def test_the_peer_is_judged_against_its_own_floor() -> None:
    drain = DrainDouble()
    watch = guard(drain)
    for now in range(3):
        watch.step(now, {"self": HIGH, "peer": 7 * GIB}, {"self": FLOOR, "peer": 8 * GIB})
    assert drain.started == [2]


def test_without_a_drain_command_it_says_so_and_runs_nothing() -> None:
    drain = DrainDouble(command=[])
    watch = guard(drain)
    feed(watch, 0, [LOW, LOW, LOW, LOW])
    assert watch.drains == 0
    assert watch.low("self") and not watch.armed
