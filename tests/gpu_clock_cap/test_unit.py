"""The clock cap's oneshot unit as the role renders it: -lgc at start, -rgc at stop, as root."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lab import nvidia_smi_standin
from tests.service.render import systemd_argv, unit_lines
from tests.units import render, role_variables, verify

ROLE = "gpu_clock_cap"


def test_the_unit_locks_the_clocks_at_start_and_resets_them_at_stop() -> None:
    variables = role_variables(ROLE, {"gpu_clock_cap_mhz": 2400})
    lines = unit_lines(render(ROLE, "gpu-clock-cap.service.j2", variables))
    assert systemd_argv(lines["ExecStart"][0]) == ["/usr/bin/nvidia-smi", "-lgc", "0,2400"]
    assert systemd_argv(lines["ExecStop"][0]) == ["/usr/bin/nvidia-smi", "-rgc"]
    assert lines["Type"] == ["oneshot"] and lines["RemainAfterExit"] == ["yes"]
    assert "User" not in lines, "-lgc needs root"
    assert lines["ConditionPathExists"] == ["/usr/bin/nvidia-smi"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_systemd_accepts_the_unit(tmp_path: Path) -> None:
    # systemd-analyze wants ExecStart's program to exist: the nvidia-smi double stands in.
    double = nvidia_smi_standin.install(tmp_path / "bin")
    variables = role_variables(
        ROLE, {"gpu_clock_cap_mhz": 2400, "gpu_clock_cap_nvidia_smi": str(double)}
    )
    text = render(ROLE, "gpu-clock-cap.service.j2", variables)
    result = verify(tmp_path, "dualspark-gpu-clock-cap.service", text)
    assert result.returncode == 0 and not result.stderr, result.stderr
