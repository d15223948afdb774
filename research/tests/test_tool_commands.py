"""The probes' shared command line (``result_cli.py``), without a GPU: each one redraws its
committed result anywhere and refuses what it cannot do before measuring anything. Their
measurements run only on a GPU (results/)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import studies
import torch
from matplotlib.image import imread

TOOLS = (
    "register_a_gemm",
    "warp_specialized_gemm",
    "power_floor",
    "fp8_split_gemm",
    "mixed_input_gemm",
)
# the GPU each probe's committed result ran on, where it is not the H200
RESULT_GPU = {"fp8_split_gemm": "h100", "mixed_input_gemm": "h100"}

Command = Callable[..., tuple[int, str]]


@pytest.fixture(params=TOOLS)
def tool(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def command_of(tool: str) -> Command:
    """Run the probe as its docs do: the overlay package and its benchmarks on PYTHONPATH."""

    def run(*args: str) -> tuple[int, str]:
        result = studies.run(sys.executable, f"research/{tool}.py", *args)
        return result.returncode, studies.output_of(result)

    return run


@pytest.fixture
def command(tool: str) -> Command:
    return command_of(tool)


def test_replot_draws_the_committed_result(command: Command, tool: str, tmp_path: Path) -> None:
    png = tmp_path / "plot.png"
    result = studies.committed_result(tool, RESULT_GPU.get(tool, "h200"))
    code, output = command("--replot", str(result), "--png", str(png))
    assert code == 0, output
    height, width, _ = imread(png).shape
    assert width > 800 and height > 300


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "--out is required"),
        (("--replot", "result.json"), "--replot needs --png"),
    ],
)
def test_incomplete_arguments_are_refused(
    command: Command, args: tuple[str, ...], message: str
) -> None:
    code, output = command(*args)
    assert code == 2
    assert message in output


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the message on a machine without a GPU"
)
def test_without_a_gpu_it_says_so_and_writes_nothing(
    command: Command, tool: str, tmp_path: Path
) -> None:
    out = tmp_path / "result.json"
    code, output = command("--out", str(out))
    assert code != 0
    assert f"{tool} needs a CUDA GPU" in output
    assert not out.exists()


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("power_floor", ("--m", "1024,big"), "--m takes comma-separated whole numbers"),
        ("power_floor", ("--turns", "0"), "must be positive"),
        ("power_floor", ("--window-s", "-1"), "must be positive"),
        ("power_floor", ("--l2-chunk-mib", "0"), "--l2-chunk-mib must be positive"),
        ("fp8_split_gemm", ("--m", "1024,big"), "--m takes comma-separated whole numbers"),
        ("fp8_split_gemm", ("--turns", "0"), "must be positive"),
        ("mixed_input_gemm", ("--window-s", "0"), "must be positive"),
    ],
)
def test_power_limit_tools_refuse_bad_settings(
    name: str, args: tuple[str, ...], message: str
) -> None:
    code, output = command_of(name)("--out", "result.json", *args)
    assert code == 2
    assert message in output
