"""The fused GEMM probes' command lines and checks, without a GPU: the kernels themselves run
only on a Hopper GPU (docs/perf/register-a-gemm-h200.md, docs/perf/warp-specialized-gemm-h200.md),
where each command checks its accuracy before it times anything."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from matplotlib.image import imread

from tests.conftest import REPO, output_of, run_tool

TOOLS = ("register_a_gemm", "warp_specialized_gemm")


def result_of(tool: str) -> Path:
    return REPO / "docs/perf" / (tool.replace("_", "-") + "-h200.json")


Probe = Callable[..., tuple[int, str]]


@pytest.fixture(params=TOOLS)
def tool(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch, tool: str) -> Probe:
    """Run the command as its docs do: the overlay package on PYTHONPATH."""
    monkeypatch.setenv("PYTHONPATH", str(REPO / "files/vllm_dualpath/src"))

    def run(*args: str) -> tuple[int, str]:
        result = run_tool(sys.executable, f"tools/{tool}.py", *args, timeout=300)
        return result.returncode, output_of(result)

    return run


def test_replot_draws_the_committed_result(probe: Probe, tool: str, tmp_path: Path) -> None:
    png = tmp_path / "plot.png"
    code, output = probe("--replot", str(result_of(tool)), "--png", str(png))
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
    probe: Probe, args: tuple[str, ...], message: str
) -> None:
    code, output = probe(*args)
    assert code == 2
    assert message in output


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the message on a machine without a GPU"
)
def test_without_a_gpu_it_says_so_and_writes_nothing(
    probe: Probe, tool: str, tmp_path: Path
) -> None:
    out = tmp_path / "result.json"
    code, output = probe("--out", str(out))
    assert code != 0
    assert f"{tool} needs a CUDA GPU" in output
    assert not out.exists()


def refusal(tool: str, call: str) -> str:
    """What ``tool``'s linear says to ``call`` (on CPU tensors: it must refuse before a launch)."""
    code = (
        "import sys, torch; sys.path[:0] = ['tools', 'files/vllm_dualpath/src']\n"
        f"from {tool} import *\n"
        "x = torch.zeros(4, 96, dtype=torch.bfloat16)\n"
        "try:\n"
        f"    {call}\n"
        "except ValueError as error:\n"
        "    print('refused:', error)\n"
    )
    return output_of(run_tool(sys.executable, "-c", code, timeout=300))


def test_register_a_refuses_k_it_cannot_step_through() -> None:
    words = "torch.zeros(6, 1024, dtype=torch.int32)"
    scales = "torch.zeros(1, 256, dtype=torch.bfloat16)"
    output = refusal("register_a_gemm", f"register_a_linear(x, {words}, {scales}, 256, 96)")
    assert "refused: needs K in pairs of 64-row steps" in output


@pytest.mark.parametrize(
    ("n", "k", "words", "groups", "message"),
    [
        (96, 256, (16, 384), 2, "needs N % 128 == 0 and 128-row scale groups"),
        (128, 256, (16, 512), 1, "needs N % 128 == 0 and 128-row scale groups"),
        (128, 256, (16, 520), 2, "expected Marlin words [16, 512]"),
    ],
)
def test_warp_specialized_refuses_shapes_it_does_not_tile(
    n: int, k: int, words: tuple[int, int], groups: int, message: str
) -> None:
    call = (
        f"warp_specialized_linear(torch.zeros(4, {k}, dtype=torch.bfloat16), "
        f"torch.zeros{words}.int(), torch.zeros({groups}, {n}, dtype=torch.bfloat16), {n}, {k})"
    )
    assert f"refused: {message}" in refusal("warp_specialized_gemm", call)


def test_the_committed_results_passed_their_accuracy_check(tool: str) -> None:
    result = json.loads(result_of(tool).read_text())
    names = [config["name"] for config in result["configs"]]
    assert result["command"].startswith(f"python3 tools/{tool}.py --out ")
    for row in result["accuracy"]:
        for name in names:
            assert row[name] <= 1.5 * row["cublas"], (row["layer"], row["m"], name)
