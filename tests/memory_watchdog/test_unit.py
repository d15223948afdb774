"""The watchdog's unit as the role renders it on each rank: rank 0 polls its peer and stops its
vLLM unit, rank 1 runs no drain; systemd accepts the unit, and the command line it runs is one
the watchdog takes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lab import spark_tree
from tests.helpers import REPO
from tests.service.render import systemd_argv, unit_lines
from tests.units import render, resolve, role_variables, verify

ROLE = "memory_watchdog"
HOSTVARS = {
    "spark-01": {"ansible_host": "spark-01.example.internal"},
    "spark-02": {"ansible_host": "spark-02.example.internal"},
}


def rank(number: int, **more: Any) -> dict[str, Any]:
    inventory = {
        "inventory_hostname": ("spark-01", "spark-02")[number],
        "spark_pair_name": "pair_one",
        "spark_pair_rank": number,
        "spark_pair_peer": ("spark-02", "spark-01")[number],
        "hostvars": HOSTVARS,
        "vllm_tp2_service_drain_timeout_s": 120,
        **more,
    }
    return role_variables(ROLE, inventory)


def exec_start(variables: dict[str, Any]) -> list[str]:
    lines = unit_lines(render(ROLE, "memory-watchdog.service.j2", variables))
    return systemd_argv(lines["ExecStart"][0])


def test_rank_0_polls_its_peer_and_stops_its_own_unit_to_drain() -> None:
    argv = exec_start(rank(0))
    options = dict(zip(argv[3 : argv.index("--") : 2], argv[4 : argv.index("--") : 2], strict=True))
    assert argv[:3] == ["/usr/bin/python3", "-m", "memory_watchdog"]
    assert options["--peer-url"] == (
        "http://spark-02.example.internal:9835/metrics?collect[]=memory"
    )
    assert options["--floor-bytes"] == str(5 << 30)
    assert options["--samples"] == "5" and options["--interval"] == "1"
    assert options["--drain-timeout"] == "210"
    assert options["--textfile-dir"] == "/var/lib/prometheus/node-exporter"
    assert argv[argv.index("--") + 1 :] == ["/usr/bin/systemctl", "stop", "vllm-tp2-rank0.service"]


def test_rank_1_runs_no_drain_and_polls_no_peer() -> None:
    argv = exec_start(rank(1))
    assert "--peer-url" not in argv
    assert argv[-1] == "--", "no drain command"


def test_a_front_door_drain_replaces_the_stop() -> None:
    command = ["/usr/local/bin/front-door-drain", "pair one"]
    argv = exec_start(rank(0, memory_watchdog_drain_command=command))
    assert argv[argv.index("--") + 1 :] == command


def test_the_service_unit_follows_vllm_tp2_service() -> None:
    variables = rank(0, vllm_tp2_service_unit="vllm-custom")
    assert resolve(variables, "memory_watchdog_drain_command") == [
        "/usr/bin/systemctl",
        "stop",
        "vllm-custom.service",
    ]


def test_the_unit_keeps_the_watchdog_alive_and_confined() -> None:
    lines = unit_lines(render(ROLE, "memory-watchdog.service.j2", rank(0)))
    assert lines["Restart"] == ["always"]
    assert lines["MemoryMin"] == ["64M"] and lines["OOMScoreAdjust"] == ["-900"]
    assert lines["ProtectSystem"] == ["strict"] and lines["NoNewPrivileges"] == ["yes"]
    assert lines["ReadWritePaths"] == [
        "-/run/memory-watchdog",
        "-/var/lib/prometheus/node-exporter",
    ]
    assert lines["RuntimeDirectory"] == ["memory-watchdog"]


@pytest.mark.parametrize("number", [0, 1])
def test_the_command_line_of_the_unit_runs(tmp_path: Path, number: int) -> None:
    procfs = tmp_path / "proc"
    procfs.mkdir()
    spark_tree.set_available(procfs, 100 * spark_tree.GIB_KIB)
    state = tmp_path / "state.json"
    variables = rank(
        number,
        memory_watchdog_python=sys.executable,
        memory_watchdog_procfs_root=str(procfs),
        memory_watchdog_textfile_dir=str(tmp_path),
        memory_watchdog_state_file=str(state),
        memory_watchdog_install_dir=str(REPO / "roles/memory_watchdog/files"),
        memory_watchdog_interval_s=0.1,
    )
    lines = unit_lines(render(ROLE, "memory-watchdog.service.j2", variables))
    environment = dict(line.split("=", 1) for line in lines["Environment"])
    process = subprocess.Popen(
        systemd_argv(lines["ExecStart"][0]),
        stderr=subprocess.PIPE,
        env={**os.environ, **environment},
    )
    try:
        deadline = time.monotonic() + 20
        while not state.exists():
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        process.terminate()
        _, said = process.communicate(timeout=10)
    written = json.loads(state.read_text(encoding="utf-8"))
    assert written["armed"] is True and written["floor_bytes"] == 5 << 30
    assert process.returncode == 0, said
    expected = "/usr/bin/systemctl stop vllm-tp2-rank0.service" if number == 0 else "none"
    assert f"drain: {expected}" in said.decode()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
@pytest.mark.parametrize("number", [0, 1])
def test_systemd_accepts_the_unit(tmp_path: Path, number: int) -> None:
    text = render(ROLE, "memory-watchdog.service.j2", rank(number))
    result = verify(tmp_path, "dualspark-memory-watchdog.service", text)
    assert result.returncode == 0 and not result.stderr, result.stderr
