"""Running molecule scenarios, and the ones that share the machine started as the session starts.

Scenarios whose timeouts leave room for a busy machine run side by side, each on hosts of its
own, from the moment collection ends: the session's other tests run while they converge, and the
scenario tests come last (tests/conftest.py orders them). `update` and `front_door`, whose gates
and health checks time out in seconds on purpose, run after everything else, side by side with
each other only.
"""

from __future__ import annotations

import subprocess
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path

import pytest

from tests.helpers import REPO, run_tool

LOGS = REPO / ".cache/molecule-logs"
SCENARIOS = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml"))
TIMED = frozenset({"update", "front_door"})
TEST_NAME = "test_molecule_scenario"
# On a 2-core machine the update scenario, beside front_door, has needed 16-18 minutes, and more
# than twice that on a slower one; 50 leaves room while a hung scenario still ends well inside
# CI's 90-minute limit.
LIMIT_S = 3000

_pool: ThreadPoolExecutor | None = None
_started: dict[str, Future[subprocess.CompletedProcess[str]]] = {}
_timed_selected: list[str] = []
_timed_started: dict[str, Future[subprocess.CompletedProcess[str]]] = {}


def log_path(scenario: str) -> Path:
    return LOGS / f"{scenario}.log"


def failed_tasks(output: str, width: int = 3000) -> str:
    """Each failed task of a scenario's output: the TASK line and what Ansible said of the
    failure (cut to ``width`` characters), first, so that a short excerpt of a failed run still
    names what failed."""
    found: list[str] = []
    task = ""
    for line in output.splitlines():
        if line.startswith("TASK ["):
            task = line.rstrip("* ")
        elif line.startswith(("fatal: ", "failed: ")) or "FAILED! =>" in line:
            found.extend([task, line[:width]])
    return "\n".join(found) if found else "(no failed task in the output)"


def run_scenario(scenario: str) -> subprocess.CompletedProcess[str]:
    try:
        result = run_tool("molecule", "test", "-s", scenario, timeout=LIMIT_S)
    except subprocess.TimeoutExpired as expired:
        # Said as a failure with the output so far; its hosts are left for `labctl down`.
        output = expired.stdout or ""
        if isinstance(output, bytes):  # subprocess keeps bytes here even in text mode
            output = output.decode("utf-8", "replace")
        result = subprocess.CompletedProcess(
            expired.cmd, 124, output, f"molecule test -s {scenario}: over {LIMIT_S} s, stopped\n"
        )
    # The whole log, kept past the run: a failure shows only its tail.
    LOGS.mkdir(parents=True, exist_ok=True)
    log_path(scenario).write_text(result.stdout + result.stderr, encoding="utf-8")
    return result


def is_scenario_test(item: pytest.Item) -> bool:
    return getattr(item, "originalname", "") == TEST_NAME


def start_side_by_side(items: list[pytest.Item]) -> None:
    """Start every selected scenario that may share the machine, once."""
    global _pool
    if _pool is not None:
        return
    selected = {item.callspec.params["scenario"] for item in items if is_scenario_test(item)}
    shared = sorted(selected - TIMED)
    _timed_selected.extend(sorted(selected & TIMED))
    _pool = ThreadPoolExecutor(max_workers=max(len(shared) + len(_timed_selected), 1))
    _started.update({scenario: _pool.submit(run_scenario, scenario) for scenario in shared})


def side_by_side() -> dict[str, Future[subprocess.CompletedProcess[str]]]:
    return _started


def timed() -> dict[str, Future[subprocess.CompletedProcess[str]]]:
    """The timed scenarios, started together once the others have ended (the caller waits)."""
    assert _pool is not None, "start_side_by_side() runs as collection ends"
    if not _timed_started:
        wait(_started.values())
        _timed_started.update(
            {scenario: _pool.submit(run_scenario, scenario) for scenario in _timed_selected}
        )
    return _timed_started


def finish() -> None:
    """At the session's end: wait for the scenarios still running (they remove their hosts)."""
    if _pool is not None:
        _pool.shutdown(wait=True)
