"""The CUTLASS mixed-input measurement without a GPU: its build's refusals and the committed result
against its doc (results/mixed-input-gemm-h100.md). The build needs nvcc and the kernels a Hopper
GPU; the probe's command line: test_tool_commands.py."""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import pytest
from studies import assert_doc_has_every_path, committed_result, output_of, probe_command, run

RESULT = committed_result("mixed_input_gemm", "h100")
# the same command run again on another machine of the same kind; its tables are in RESULT's doc
REPEAT = RESULT.with_name("mixed-input-gemm-h100-repeat.json")
RESULTS = (RESULT, REPEAT)


def build(out: Path, *args: str, path: str | None = None) -> tuple[int, str]:
    command = (sys.executable, "research/mixed_input/build.py", "--out", str(out / "build"), *args)
    if path is None:
        result = run(*command, timeout=60)
    else:
        result = run("/usr/bin/env", f"PATH={path}", *command, timeout=60)
    return result.returncode, output_of(result)


def wheel_with(folder: Path, name: str, member: str) -> Path:
    wheel = folder / name
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(member, "")
    return wheel


def test_the_build_needs_the_arch_specific_target(tmp_path: Path) -> None:
    code, output = build(tmp_path, "--cutlass-wheel", "any.whl", "--arch", "90")
    assert code == 2
    assert "--arch needs the arch-specific suffix 'a'" in output


def test_the_build_names_a_missing_wheel(tmp_path: Path) -> None:
    code, output = build(tmp_path, "--cutlass-wheel", "missing/nvidia_cutlass.whl")
    assert code == 1
    assert "missing/nvidia_cutlass.whl: no such file (pip download nvidia-cutlass" in output


def test_the_build_refuses_a_wheel_without_cutlass_headers(tmp_path: Path) -> None:
    wheel = wheel_with(tmp_path, "other-1.0-py3-none-any.whl", "other/__init__.py")
    code, output = build(tmp_path, "--cutlass-wheel", str(wheel))
    assert code == 1
    assert "no CUTLASS headers inside (not an nvidia-cutlass wheel?)" in output


def test_the_build_says_when_nvcc_is_missing(tmp_path: Path) -> None:
    header = "cutlass_library/source/include/cutlass/cutlass.h"
    wheel = wheel_with(tmp_path, "nvidia_cutlass-4.2.0.0-py3-none-any.whl", header)
    code, output = build(tmp_path, "--cutlass-wheel", str(wheel), path=str(tmp_path))
    assert code == 1
    assert "nvcc not found on PATH" in output


@pytest.mark.parametrize("result_path", RESULTS, ids=lambda path: path.stem)
def test_the_committed_results_passed_their_accuracy_check(result_path: Path) -> None:
    result = json.loads(result_path.read_text())
    assert probe_command(result)[0] == "mixed_input_gemm.py"
    assert probe_command(result)[1][0] == "--m"
    assert len(result["accuracy"]) == 8
    paths = result["rows"][0]["paths"]
    cutlass = [name for name in paths if name.startswith(("convert", "scaled"))]
    assert len(cutlass) == 5
    for row in result["accuracy"]:
        for name in cutlass:
            assert row[name] <= 1.5 * row["bf16"], (name, row)
        assert row["unpack_cublas"] == row["bf16"], row  # the same BF16 weight, the same GEMM


@pytest.mark.parametrize("result_path", RESULTS, ids=lambda path: path.stem)
def test_the_committed_results_are_what_the_doc_says(result_path: Path) -> None:
    assert_doc_has_every_path(result_path, RESULT.with_suffix(".md"))
