"""The exporter's unit and node_exporter's settings as the role renders them: systemd accepts the
unit, and the command line it runs is one the exporter takes, serving what the inventory names."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from lab import spark_tree
from tests.helpers import REPO
from tests.service.render import systemd_argv, unit_lines
from tests.spark_exporter.conftest import LISTENING, parse
from tests.units import render, resolve, role_variables, verify

ROLE = "spark_exporter"
INVENTORY: dict[str, Any] = {
    "rail_network_twins": [
        {"interface": twin.interface, "subnet": f"192.168.10{number}.0/24"}
        for number, twin in enumerate(spark_tree.TWINS)
    ],
    "rail_network_mtu": 9000,
    "memory_watchdog_floor_bytes": 6 << 30,
    "spark_exporter_tls_certificate": "/etc/ssl/front door/cert.pem",
}


def unit(**more: Any) -> tuple[str, dict[str, list[str]]]:
    text = render(ROLE, "spark-exporter.service.j2", role_variables(ROLE, {**INVENTORY, **more}))
    return text, unit_lines(text)


def test_the_unit_runs_the_exporter_unprivileged_and_confined() -> None:
    _, lines = unit()
    assert lines["User"] == ["spark-exporter"]
    assert lines["NoNewPrivileges"] == ["yes"]
    assert lines["CapabilityBoundingSet"] == [""]
    assert lines["ProtectSystem"] == ["strict"]
    argv = systemd_argv(lines["ExecStart"][0])
    assert argv[:3] == ["/usr/bin/python3", "-m", "spark_exporter"]
    options = list(zip(argv[3::2], argv[4::2], strict=True))
    assert ("--port", "9835") in options and ("--listen-address", "0.0.0.0") in options
    assert [value for flag, value in options if flag == "--twin"] == [
        twin.interface for twin in spark_tree.TWINS
    ]
    assert ("--expected-mtu", "9000") in options
    assert ("--memory-floor-bytes", str(6 << 30)) in options
    assert ("--overlay-stats-dir", "/var/lib/dualspark/overlay-calls") in options
    assert ("--overlay-dir", "/opt/dualspark/overlay") in options
    assert ("--tls-certificate", "/etc/ssl/front door/cert.pem") in options
    assert "--nccl-log" not in argv


def test_the_defaults_follow_the_other_roles() -> None:
    variables = role_variables(
        ROLE,
        {
            "vllm_tp2_service_overlay_stats_dir": "/srv/calls",
            "dualpath_overlay_root": "/srv/overlay",
            "rail_network_mtu": 4200,
        },
    )
    assert resolve(variables, "spark_exporter_overlay_stats_dir") == "/srv/calls"
    assert resolve(variables, "spark_exporter_overlay_dir") == "/srv/overlay"
    assert int(resolve(variables, "spark_exporter_expected_mtu")) == 4200
    assert resolve(variables, "spark_exporter_twins") == []
    assert int(resolve(variables, "spark_exporter_memory_floor_bytes")) == 5 << 30


def test_the_command_line_of_the_unit_serves_what_it_names(tmp_path: Path) -> None:
    sysfs, procfs = spark_tree.build(tmp_path)
    _, lines = unit(
        spark_exporter_python=sys.executable,
        spark_exporter_listen_address="127.0.0.1",
        spark_exporter_port=0,
        spark_exporter_sysfs_root=str(sysfs),
        spark_exporter_procfs_root=str(procfs),
        spark_exporter_tls_certificate="",
        spark_exporter_install_dir=str(REPO / "roles/spark_exporter/files"),
    )
    environment = dict(line.split("=", 1) for line in lines["Environment"])
    log = tmp_path / "exporter.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            systemd_argv(lines["ExecStart"][0]), stderr=stderr, env={**os.environ, **environment}
        )
    try:
        deadline = time.monotonic() + 30
        while not (match := LISTENING.search(log.read_text(encoding="utf-8"))):
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.02)
        with urllib.request.urlopen(f"http://127.0.0.1:{match[1]}/metrics", timeout=30) as answer:
            seen = parse(answer.read().decode("utf-8"))
    finally:
        process.terminate()
        process.wait(timeout=10)
    for twin in spark_tree.TWINS:
        assert seen.value("spark_rail_expected_mtu_bytes", twin=twin.interface) == 9000
        assert seen.value("spark_rail_link_up", twin=twin.interface) == 1
    assert seen.value("spark_memory_floor_bytes") == 6 << 30


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_systemd_accepts_the_unit(tmp_path: Path) -> None:
    text, _ = unit(spark_exporter_nccl_log="/var/log/dualspark/nccl.log")
    result = verify(tmp_path, "spark-exporter.service", text)
    assert result.returncode == 0 and not result.stderr, result.stderr


def test_node_exporter_listens_where_asked_with_the_textfile_directory() -> None:
    for address, listen in (("0.0.0.0", "0.0.0.0:9100"), ("::", "[::]:9100")):
        variables = role_variables(ROLE, {"spark_exporter_listen_address": address})
        text = render(ROLE, "prometheus-node-exporter.default.j2", variables)
        (args,) = [line for line in text.splitlines() if line.startswith("ARGS=")]
        assert args == (
            f'ARGS="--web.listen-address={listen} '
            '--collector.textfile.directory=/var/lib/prometheus/node-exporter"'
        )
