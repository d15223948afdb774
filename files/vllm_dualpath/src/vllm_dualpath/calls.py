"""How often each path of the dual-path op ran in this process, so a service can show it is live.

    python -m vllm_dualpath.calls DIR   # every process's counts in DIR, summed

``record`` counts a call; a daemon thread writes the counts to
``<DUALPATH_STATS_DIR>/<host>-<pid>.json`` and logs them (package README, "Call counts"). A
CUDA-graph replay does not re-enter Python: a graph's calls count once, at capture.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import multiprocessing
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from vllm_dualpath import settings
from vllm_dualpath.calibration import MARLIN, UNPACK

logger = logging.getLogger("vllm.dualpath")

PATHS: Final[tuple[str, ...]] = (MARLIN, UNPACK)
PROCESSES: Final = "processes"
TICK_S = 1.0  # how often the thread looks at the counts

_lock = threading.Lock()
_counts: dict[str, int] = dict.fromkeys(PATHS, 0)
_stats_dir: Path | None = None
_interval_s: int = settings.DEFAULT_REPORT_INTERVAL_S
_reporter: Reporter | None = None
_exit_hook_registered = False


def configure(stats_dir: Path | None, interval_s: int) -> None:
    """Where the counts go and how often they are logged (the reporter reads these each tick)."""
    global _stats_dir, _interval_s
    _stats_dir, _interval_s = stats_dir, interval_s


def record(path: str, m: int, size_n: int, size_k: int) -> None:
    """Count one call served by ``path`` ('marlin' or 'unpack'); called on every op call."""
    with _lock:
        count = _counts[path] + 1
        _counts[path] = count
    if count == 1:
        logger.info(
            "vllm-dualpath: first call on the %s path (M=%d, %dx%d) in pid %d",
            path,
            m,
            size_n,
            size_k,
            os.getpid(),
        )
        _start_reporter()


def snapshot() -> dict[str, int]:
    """The counts so far in this process."""
    with _lock:
        return dict(_counts)


def reset() -> None:
    """Zero the counts and stop the reporter, as in a fresh process (tests)."""
    global _reporter
    with _lock:
        reporter, _reporter = _reporter, None
        _counts.update(dict.fromkeys(PATHS, 0))
    if reporter is not None:
        reporter.stop()


def reporter() -> Reporter | None:
    """This process's reporter, once a call has started it."""
    return _reporter


def _start_reporter() -> None:
    global _reporter, _exit_hook_registered
    with _lock:
        if _reporter is not None:
            return
        _reporter = Reporter()
        started = _reporter
        register_exit_hook = not _exit_hook_registered
        _exit_hook_registered = True
    started.start()
    if register_exit_hook:
        atexit.register(report_at_exit)


def report_at_exit() -> None:
    """The atexit hook: the final file and the totals line, once, if anything was counted."""
    current = _reporter
    if current is not None:
        current.finish()


def _forget_parents_counts() -> None:
    # A forked child inherits the parent's counts and a reporter whose thread did not come
    # along: it is a process of its own and starts from zero.
    global _lock, _reporter
    _lock = threading.Lock()
    _counts.update(dict.fromkeys(PATHS, 0))
    _reporter = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parents_counts)


def describe_process() -> str:
    """A short name for this process: its multiprocessing name (vLLM names its workers and
    engine core), else the program's name."""
    name = multiprocessing.current_process().name
    if name != "MainProcess":
        return name
    program = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return program or "python"


def stats_file(stats_dir: Path, host: str, pid: int) -> Path:
    return stats_dir / f"{host}-{pid}.json"


def write_atomically(target: Path, content: str) -> None:
    """Readers see the old file or the new one, never half of one."""
    # A name *.json globs do not match, in the same directory so the rename stays atomic.
    temporary = target.with_name(f".{target.name}.{threading.get_ident()}.tmp")
    try:
        temporary.write_text(content, encoding="utf-8")
        temporary.replace(target)  # os.replace: atomic on POSIX
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        raise


class Reporter:
    """Writes and logs this process's counts; ``step`` is one tick, the thread calls it."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        tick_s: float | None = None,
    ) -> None:
        self.tick_s = TICK_S if tick_s is None else tick_s
        self._clock = clock
        self._pid = os.getpid()
        self._host = socket.gethostname()
        self._write_lock = threading.Lock()  # the exit hook and the thread never write at once
        self._written: tuple[Path, dict[str, int]] | None = None
        self._unwritable: Path | None = None
        self._logged = dict.fromkeys(PATHS, 0)
        self._logged_at = clock()
        self._finished = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="vllm-dualpath-calls", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.tick_s):
            try:
                self.step()
            except Exception:  # reporting must never end in a traceback on a serving process
                logger.exception("vllm-dualpath: the call reporter failed; it stops")
                return

    def step(self, now: float | None = None) -> None:
        """Write the file if the counts changed; log them if the interval has passed since
        the last line and they changed since it."""
        now = self._clock() if now is None else now
        counts = snapshot()
        with self._write_lock:
            if self._finished:
                return
            self._write(counts, final=False)
        interval = _interval_s
        if interval > 0 and now - self._logged_at >= interval and counts != self._logged:
            self._log(counts, "")
            self._logged, self._logged_at = counts, now

    def finish(self) -> None:
        """The final file and the totals line; only the first call does anything."""
        self._stop.set()
        counts = snapshot()
        with self._write_lock:
            if self._finished or not any(counts.values()):
                return
            self._finished = True
            self._write(counts, final=True)
        self._log(counts, " at exit")

    def _log(self, counts: dict[str, int], when: str) -> None:
        logger.info(
            "vllm-dualpath: calls in pid %d%s: %s",
            self._pid,
            when,
            " ".join(f"{path}={counts[path]}" for path in PATHS),
        )

    def _write(self, counts: dict[str, int], final: bool) -> None:
        stats_dir = _stats_dir
        if stats_dir is None or stats_dir == self._unwritable:
            return
        if not final and self._written == (stats_dir, counts):
            return
        target = stats_file(stats_dir, self._host, self._pid)
        content = {
            "pid": self._pid,
            "host": self._host,
            "process": describe_process(),
            "calls": counts,
            "updated": time.time(),
            "final": final,
        }
        try:
            stats_dir.mkdir(parents=True, exist_ok=True)
            write_atomically(target, json.dumps(content, sort_keys=True) + "\n")
        except OSError as error:
            self._unwritable = stats_dir
            logger.warning(
                "vllm-dualpath: cannot write call counts to %s (%s); they are only logged",
                stats_dir,
                error,
            )
            return
        self._written = (stats_dir, counts)


def _calls_of(document: Any) -> dict[str, int] | None:
    if not isinstance(document, dict) or not isinstance(document.get("calls"), dict):
        return None
    calls: dict[str, int] = {}
    for path in PATHS:
        value = document["calls"].get(path, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return None
        calls[path] = value
    return calls


def read_stats_dir(stats_dir: Path | str) -> dict[str, int]:
    """The counts of every stats file in the directory, summed, and how many files gave them;
    files that cannot be read or parsed (a partial copy, say) are skipped."""
    directory = Path(stats_dir)
    if not directory.is_dir():
        raise NotADirectoryError(f"{directory} is not a directory")
    total = dict.fromkeys(PATHS, 0)
    processes = 0
    for file in sorted(directory.glob("*.json")):
        try:
            calls = _calls_of(json.loads(file.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
        if calls is None:
            continue
        for path in PATHS:
            total[path] += calls[path]
        processes += 1
    return {**total, PROCESSES: processes}


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if len(arguments) != 1:
        print("usage: python -m vllm_dualpath.calls STATS_DIR", file=sys.stderr)
        return 2
    try:
        summed = read_stats_dir(arguments[0])
    except NotADirectoryError as error:
        print(f"vllm-dualpath: {error}", file=sys.stderr)
        return 2
    print(json.dumps(summed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
