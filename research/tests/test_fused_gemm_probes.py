"""The fused GEMM probes' checks, without a GPU: the kernels themselves run only on a Hopper GPU
(results/register-a-gemm-h200.md, results/warp-specialized-gemm-h200.md), where each command
checks its accuracy before it times anything. Their command lines: test_tool_commands.py."""

from __future__ import annotations

import json
import sys

import pytest
from studies import committed_result, output_of, probe_command, run

TOOLS = ("register_a_gemm", "warp_specialized_gemm")


@pytest.fixture(params=TOOLS)
def tool(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def refusal(tool: str, call: str) -> str:
    """What ``tool``'s linear says to ``call`` (on CPU tensors: it must refuse before a launch)."""
    code = (
        "import torch\n"
        f"from {tool} import *\n"
        "x = torch.zeros(4, 96, dtype=torch.bfloat16)\n"
        "try:\n"
        f"    {call}\n"
        "except ValueError as error:\n"
        "    print('refused:', error)\n"
    )
    return output_of(run(sys.executable, "-c", code))


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
    result = json.loads(committed_result(tool).read_text())
    names = [config["name"] for config in result["configs"]]
    assert probe_command(result)[0] == f"{tool}.py"
    assert probe_command(result)[1][0] == "--out"
    for row in result["accuracy"]:
        for name in names:
            assert row[name] <= 1.5 * row["cublas"], (row["layer"], row["m"], name)
