"""The watchdog as it runs on a node: a subprocess on a made-up procfs, with a test double for the
drain command that records each time it ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lab import spark_tree
from tests.helpers import REPO
from tests.spark_exporter.conftest import start_exporter  # noqa: F401 (a fixture the tests use)

FILES = REPO / "roles/memory_watchdog/files"
GIB = 1 << 30
# Stands for the drain command (a systemctl stop or the front door's drain): records when it ran,
# as Unix time, and exits with the status in `status` beside it (0 without one).
DRAIN_DOUBLE = """#!/bin/sh
date +%s.%N >> "$(dirname "$0")/drained"
echo "$@" >> "$(dirname "$0")/drain-arguments"
exit "$(cat "$(dirname "$0")/status" 2>/dev/null || echo 0)"
"""


@dataclass
class Watchdog:
    process: subprocess.Popen[bytes]
    procfs: Path
    state_file: Path
    textfile_dir: Path
    log: Path
    drain_double: Path

    def state(self) -> dict[str, Any]:
        try:
            return json.loads(self.state_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    def wait_for(self, check: Callable[[dict[str, Any]], bool], timeout: float = 20) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.state()
            if state and check(state):
                return state
            assert self.process.poll() is None, self.log.read_text(encoding="utf-8")
            time.sleep(0.01)
        raise AssertionError(f"not reached; state {self.state()}; log {self.said()}")

    def drained(self) -> list[float]:
        record = self.drain_double.with_name("drained")
        if not record.exists():
            return []
        return [float(line) for line in record.read_text(encoding="utf-8").split()]

    def said(self) -> str:
        return self.log.read_text(encoding="utf-8")


@pytest.fixture
def start_watchdog(tmp_path: Path) -> Iterator[Callable[..., Watchdog]]:
    processes: list[subprocess.Popen[bytes]] = []

    def start(*arguments: str, drain: bool = True, available_gib: float = 100) -> Watchdog:
        root = tmp_path / f"watchdog-{len(processes)}"
        procfs, textfile_dir = root / "proc", root / "textfile"
        procfs.mkdir(parents=True)
        textfile_dir.mkdir()
        spark_tree.set_available(procfs, int(available_gib * spark_tree.GIB_KIB))
        double = root / "bin/drain-double"
        double.parent.mkdir()
        double.write_text(DRAIN_DOUBLE, encoding="utf-8")
        double.chmod(0o755)
        state_file = root / "state.json"
        log = root / "watchdog.log"
        env = {**os.environ, "PYTHONPATH": str(FILES), "PYTHONDONTWRITEBYTECODE": "1"}
        command = [
            sys.executable, "-m", "memory_watchdog",
            "--procfs-root", str(procfs),
            "--floor-bytes", str(5 * GIB),
            "--state-file", str(state_file),
            "--textfile-dir", str(textfile_dir),
            *arguments,
            "--", *([str(double), "stop", "vllm-tp2-rank0.service"] if drain else []),
        ]  # fmt: skip
        with log.open("wb") as stderr:
            process = subprocess.Popen(command, stderr=stderr, env=env)
        processes.append(process)
        watchdog = Watchdog(process, procfs, state_file, textfile_dir, log, double)
        watchdog.wait_for(lambda state: state["available_bytes"].get("self") is not None)
        return watchdog

    yield start
    for process in processes:
        process.terminate()
        process.wait(timeout=10)
