"""The FP8-split probe without a GPU: its row split and its GEMM on CPU tensors through Triton's
interpreter (in a child process, where TRITON_INTERPRET=1 is set before Triton loads), its
refusals, and the committed result against its doc (results/fp8-split-gemm-h100.md). The
measurement runs only on a Hopper GPU; the command line, its window settings included:
test_tool_commands.py."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from studies import assert_doc_has_every_path, committed_result, output_of, probe_command, run

RESULT = committed_result("fp8_split_gemm", "h100")

PRELUDE = """
import json, torch
import fp8_split_gemm as tool
g = torch.Generator().manual_seed(5)
"""

# Rows of every kind the split must take: activations with outlier channels, a zero row,
# values that round up into the next binade, tiny and huge magnitudes, negative ones.
ACTIVATIONS = """
x = torch.randn(8, 384, generator=g)
x[:, :5] *= 300.0
x[1] = 0.0
x[2, :5] = torch.tensor([254.0, 247.0, -0.01, 1.0, 0.5])
x[3] *= 1e-30
x[4] *= 1e30
x[5] = -x[5].abs()
x = x.to(torch.bfloat16)
"""


def interpreted(body: str) -> dict[str, Any]:
    """Run ``body`` after PRELUDE with Triton's interpreter; it prints one JSON line last."""
    result = run(sys.executable, "-c", PRELUDE + body, timeout=900, TRITON_INTERPRET="1")
    output = output_of(result)
    assert result.returncode == 0, output
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def test_the_split_is_exact_down_to_2_to_the_minus_9_of_each_row() -> None:
    checks = interpreted(
        ACTIVATIONS
        + """
hi, lo, inverse = tool.split(x)
value = x.float()
back = (hi.float() + lo.float()) * inverse[:, None]
promised = value.abs() >= value.abs().amax(1, keepdim=True) * 2**-9
error = (back - value).abs()
print(json.dumps({
    "exact": bool(torch.equal(back[promised], value[promised])),
    "promised": int(promised.sum()),
    "small_within_bound": bool((error <= 2**-10 * inverse[:, None]).all()),
    "hi_is_nearest_e4m3": bool(torch.equal(
        hi.float(), (value / inverse[:, None]).to(torch.float8_e4m3fn).float())),
    "largest_scaled": (value.abs().amax(1) / inverse).tolist(),
    "zero_row_codes": int(hi[1].view(torch.uint8).sum() + lo[1].view(torch.uint8).sum()),
    "rounded_up_hi": hi[2, :2].float().tolist(),
}))
""",
    )
    assert checks["exact"] and checks["promised"] > 1000
    assert checks["small_within_bound"]
    assert checks["hi_is_nearest_e4m3"]
    # every row but the zero one lands in [2**7, 2**8): under e4m3's largest, 448
    assert all(128 <= top < 256 for i, top in enumerate(checks["largest_scaled"]) if i != 1)
    assert checks["zero_row_codes"] == 0
    assert checks["rounded_up_hi"] == [256.0, 240.0]  # 254 rounds into the next binade


def test_the_gemm_is_the_block_by_block_product_of_the_parts() -> None:
    checks = interpreted(
        ACTIVATIONS
        + """
from vllm_dualpath.marlin_reference import dequantize_fp8, random_fp8_weight, random_scales
n, k = 256, 384
fp8 = random_fp8_weight(n, k, "cpu", g)
scales = random_scales(n, k, (128, 128), "cpu", g)
weight = tool.Fp8Weight(
    fp8, scales.to(torch.bfloat16).float(), dequantize_fp8(fp8, scales, (128, 128)), None)
y = tool.split_linear(x, weight)
hi, lo, inverse = tool.split(x)
total = torch.zeros(x.shape[0], n)
for block in range(k // 128):
    cut = slice(128 * block, 128 * (block + 1))
    w = fp8[:, cut].float().t()
    part = hi[:, cut].float() @ w + lo[:, cut].float() @ w
    total += part * weight.block_scales[:, block].repeat_interleave(128)
expected = (total * inverse[:, None]).to(torch.bfloat16)
exact = x.float() @ weight.unrounded().t()
rows = [0, 2, 3, 4, 5, 6, 7]  # all but the zero row
print(json.dumps({
    "same_bits": bool(torch.equal(y.view(torch.int16), expected.view(torch.int16))),
    "error": ((y.float() - exact).abs().amax(1) / exact.abs().amax(1))[rows].max().item(),
}))
""",
    )
    assert checks["same_bits"]
    assert checks["error"] < 2**-8  # each row: BF16 output rounding, no more


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("tool.split(torch.zeros(4, 128))", "expected a contiguous 2-D BF16 activation"),
        ("tool.split_linear(x, weight(200, 128))", "needs N and K in whole 128-wide blocks"),
        ("tool.split_linear(x, weight(256, 256))", "x has K=128, the weight K=256"),
    ],
)
def test_it_refuses_what_it_does_not_tile(call: str, message: str) -> None:
    checks = interpreted(
        f"""
x = torch.zeros(4, 128, dtype=torch.bfloat16)
def weight(n, k):
    fp8 = torch.zeros(n, k, dtype=torch.float8_e4m3fn)
    return tool.Fp8Weight(fp8, torch.ones(2, 2), torch.zeros(n, k), None)
try:
    {call}
    print(json.dumps({{"refused": None}}))
except ValueError as error:
    print(json.dumps({{"refused": str(error)}}))
""",
    )
    assert checks["refused"] is not None and message in checks["refused"]


def test_the_committed_result_passed_its_accuracy_check() -> None:
    result = json.loads(RESULT.read_text())
    assert probe_command(result)[0] == "fp8_split_gemm.py"
    assert probe_command(result)[1][0] == "--m"
    assert len(result["accuracy"]) == 8
    for row in result["accuracy"]:
        assert row["fp8_split_vs_unrounded"] <= 1.5 * row["bf16"], row
        assert row["unpack_cublas"] == row["bf16"], row  # the same BF16 weight, the same GEMM


def test_the_committed_result_is_what_its_doc_says() -> None:
    assert_doc_has_every_path(RESULT)
