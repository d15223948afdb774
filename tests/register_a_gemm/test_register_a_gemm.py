"""The register-operand GEMM probe's command line and checks, without a GPU: the kernel itself
runs only on a Hopper GPU (docs/perf/register-a-gemm-h200.md), where the command checks its
accuracy before it times anything."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from matplotlib.image import imread

from tests.conftest import REPO, output_of, run_tool

RESULT = REPO / "docs/perf/register-a-gemm-h200.json"


Probe = Callable[..., tuple[int, str]]


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> Probe:
    """Run the command as its docs do: the overlay package on PYTHONPATH."""
    monkeypatch.setenv("PYTHONPATH", str(REPO / "files/vllm_dualpath/src"))

    def run(*args: str) -> tuple[int, str]:
        result = run_tool(sys.executable, "tools/register_a_gemm.py", *args, timeout=300)
        return result.returncode, output_of(result)

    return run


def test_replot_draws_the_committed_result(probe: Probe, tmp_path: Path) -> None:
    png = tmp_path / "plot.png"
    code, output = probe("--replot", str(RESULT), "--png", str(png))
    assert code == 0, output
    height, width, _ = imread(png).shape
    assert width > 800 and height > 300


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "--out is required"),
        (("--replot", str(RESULT)), "--replot needs --png"),
    ],
)
def test_incomplete_arguments_are_refused(
    probe: Probe, args: tuple[str, ...], message: str
) -> None:
    code, output = probe(*args)
    assert code == 2
    assert message in output


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the message on a machine without a GPU"
)
def test_without_a_gpu_it_says_so_and_writes_nothing(probe: Probe, tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    code, output = probe("--out", str(out))
    assert code != 0
    assert "needs a CUDA GPU" in output
    assert not out.exists()


def test_shapes_the_kernel_cannot_take_are_refused_before_any_launch() -> None:
    code = (
        "import sys, torch; sys.path[:0] = ['tools', 'files/vllm_dualpath/src']\n"
        "from register_a_gemm import register_a_linear\n"
        "x = torch.zeros(4, 96, dtype=torch.bfloat16)\n"
        "packed = torch.zeros(6, 256 * 4, dtype=torch.int32)\n"
        "scales = torch.zeros(1, 256, dtype=torch.bfloat16)\n"
        "try:\n"
        "    register_a_linear(x, packed, scales, 256, 96)\n"
        "except ValueError as error:\n"
        "    print('refused:', error)\n"
    )
    result = run_tool(sys.executable, "-c", code, timeout=300)
    assert "refused: needs K in pairs of 64-row steps" in output_of(result)


def test_the_committed_result_passed_its_accuracy_check() -> None:
    result = json.loads(RESULT.read_text())
    names = [config["name"] for config in result["configs"]]
    for row in result["accuracy"]:
        for name in names:
            assert row[name] <= 1.5 * row["cublas"], (row["layer"], row["m"], name)
