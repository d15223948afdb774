"""The watchdog's decision, apart from any clock or file: streaks of low samples per box, one
drain when a streak reaches the count, and re-arming only once every box is back above the floor
for as many samples and the hold-off since the drain has passed.

A box whose reading is missing (meminfo unreadable, the peer unreachable) neither extends nor
ends its streak: a peer that stops answering while it is low is more likely wedging than well.
"""

from __future__ import annotations

import logging
import subprocess
from dataclasses import dataclass, field

logger = logging.getLogger("memory_watchdog")
GIB = 1 << 30


def gib(value: int) -> str:
    return f"{value / GIB:.2f} GiB"


@dataclass
class Streak:
    """Consecutive samples under (low) and at or above (high) the floor."""

    low: int = 0
    high: int = 0
    last: int | None = None

    def add(self, available: int | None, floor: int) -> None:
        self.last = available
        if available is None:
            return
        if available < floor:
            self.low, self.high = self.low + 1, 0
        else:
            self.low, self.high = 0, self.high + 1


class Drain:
    """The drain command, run at most once at a time, with a time limit; its output goes to the
    watchdog's journal."""

    def __init__(self, command: list[str], timeout_s: float) -> None:
        self.command = command
        self.timeout_s = timeout_s
        self._process: subprocess.Popen[bytes] | None = None
        self._started = 0.0
        self.exit_code: int | None = None

    @property
    def running(self) -> bool:
        return self._process is not None

    def start(self, now: float) -> None:
        self.exit_code = None
        if not self.command:
            return
        logger.warning("draining: running %s", " ".join(self.command))
        try:
            self._process = subprocess.Popen(self.command, stdin=subprocess.DEVNULL)
        except OSError as error:
            logger.error("the drain command could not start: %s", error)
            self.exit_code = 127
            return
        self._started = now

    def poll(self, now: float) -> None:
        process = self._process
        if process is None:
            return
        code = process.poll()
        if code is None and now - self._started > self.timeout_s:
            logger.error("the drain command ran past %s s; killed", self.timeout_s)
            process.kill()
            code = process.wait()
        if code is None:
            return
        self._process = None
        self.exit_code = code
        if code == 0:
            logger.warning("the drain command finished")
        else:
            logger.error("the drain command failed (exit status %s)", code)


@dataclass
class Guard:
    """Whether to drain, sample by sample."""

    floor: int
    samples: int
    holdoff_s: float
    drain: Drain
    streaks: dict[str, Streak] = field(default_factory=dict)
    armed: bool = True
    drains: int = 0
    drained_at: float | None = None

    def low(self, box: str) -> bool:
        streak = self.streaks.get(box)
        return streak is not None and streak.low >= self.samples

    def step(self, now: float, readings: dict[str, int | None], floors: dict[str, int]) -> None:
        """One sample of every box (``self``, ``peer``): available bytes, None when unread."""
        self.drain.poll(now)
        for box, available in readings.items():
            floor = floors.get(box, self.floor)
            streak = self.streaks.setdefault(box, Streak())
            was_low = streak.low
            streak.add(available, floor)
            if available is not None and streak.low == 1 and was_low == 0:
                logger.info(
                    "%s: MemAvailable %s under the floor %s", box, gib(available), gib(floor)
                )
            elif available is not None and streak.low == 0 and was_low > 0:
                logger.info("%s: MemAvailable %s, back above the floor", box, gib(available))
        if self.armed:
            low = [box for box in self.streaks if self.low(box)]
            if low:
                self._fire(now, low, floors)
        elif self._may_rearm(now):
            self.armed = True
            logger.info("re-armed: every box above the floor for %s samples", self.samples)

    def _fire(self, now: float, low: list[str], floors: dict[str, int]) -> None:
        self.armed = False
        self.drained_at = now
        said = ", ".join(
            f"{box} {gib(self.streaks[box].last or 0)} < {gib(floors.get(box, self.floor))}"
            for box in low
        )
        if not self.drain.command:
            logger.warning(
                "under the floor for %s samples (%s); no drain command here: the pair's rank-0 "
                "watchdog drains it",
                self.samples,
                said,
            )
            return
        logger.warning("under the floor for %s samples (%s): draining the pair", self.samples, said)
        self.drains += 1
        self.drain.start(now)

    def _may_rearm(self, now: float) -> bool:
        if self.drain.running or self.drained_at is None:
            return False
        if now - self.drained_at < self.holdoff_s:
            return False
        return all(streak.high >= self.samples for streak in self.streaks.values())
