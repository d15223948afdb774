"""The fused W8A16 GEMM against a float64 reference of Marlin's arithmetic, on the CPU."""

from __future__ import annotations

import pytest
import torch

from fp8_cases import Case, build
from vllm_dualpath import fused, layout

pytestmark = pytest.mark.interpreter

# Small blocks keep the interpreter quick and put every edge (M, N and K tails) in play.
SMALL = fused.Tiling(block_m=16, n_tiles=2, k_tiles=2, num_warps=4, num_stages=1, group_m=2)
SMALL_WEIGHT_LEFT = fused.Tiling(16, 2, 2, 4, 1, group_m=3, weight_left=True)
SMALL_UNSHUFFLED = fused.Tiling(16, 2, 2, 4, 1, group_m=2, unshuffle=True)
SMALL_UNSHUFFLED_LEFT = fused.Tiling(16, 2, 2, 4, 1, group_m=3, weight_left=True, unshuffle=True)
TILINGS = {
    "x-left": SMALL,
    "weight-left": SMALL_WEIGHT_LEFT,
    "unshuffled": SMALL_UNSHUFFLED,
    "unshuffled-weight-left": SMALL_UNSHUFFLED_LEFT,
}

CASES = [
    Case(100, 300, "channel"),
    Case(200, 300, "block"),
    Case(64, 128, "tensor"),
    Case(130, 260, "block"),
    Case(320, 192, "shard"),
    Case(1, 2, "channel"),
    Case(3, 6, "tensor"),
]


def _reference(
    x: torch.Tensor,
    packed: torch.Tensor,
    stored: torch.Tensor,
    bias: torch.Tensor | None,
    case: Case,
    channel_epilogue: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(expected BF16 output, its rounding allowance: two BF16 roundings, before and after the
    bias, plus fp32 sums in another order, at the scale of the sum of |x| |w|)."""
    n, k = case.size_n, case.size_k
    if channel_epilogue:
        codes = layout.unpack_reference(packed)[:k, :n].t()
        weight = layout.decode_fp8_as_marlin(codes).double()
        scale = layout.true_scales(layout.unpermute_scales(stored))[0, :n].double()
        exact = (x.double() @ weight.t()) * scale
        magnitude = (x.double().abs() @ weight.abs().t()) * scale.abs()
    else:
        weight = layout.dequantize_reference(packed, stored, n, k).double()
        exact = x.double() @ weight.t()
        magnitude = x.double().abs() @ weight.abs().t()
    expected = exact.to(torch.bfloat16)
    allowed = exact.abs() * 2.0**-6 + magnitude * 2.0**-18 + 1e-30
    if bias is not None:
        expected = expected + layout.unpermute_channels(bias)[:n]
        allowed += expected.double().abs() * 2.0**-6
    return expected, allowed


def _assert_within_rounding(got: torch.Tensor, expected: torch.Tensor, allowed: torch.Tensor):
    worst = ((got.double() - expected.double()).abs() / allowed).max().item()
    assert worst <= 1.0, f"error reaches {worst:.2f}x the rounding allowance"


# Group-wise (block) scales are always folded into the weight; channel-wise ones either way.
SCALE_MODES = [
    pytest.param(case, epilogue, id=f"{case}-{'epilogue' if epilogue else 'folded'}")
    for case in CASES
    for epilogue in ((False,) if case.scales == "block" else (False, True))
]


@pytest.mark.parametrize(("case", "channel_epilogue"), SCALE_MODES)
@pytest.mark.parametrize("m", [1, 37])
@pytest.mark.parametrize("tiling", TILINGS.values(), ids=TILINGS.keys())
def test_matches_marlins_arithmetic(
    case: Case, channel_epilogue: bool, m: int, tiling: fused.Tiling
):
    _, packed, stored, bias = build(case)
    x = torch.randn(m, case.size_k, generator=torch.Generator().manual_seed(m)).to(torch.bfloat16)
    got = fused.fused_linear(
        x,
        packed,
        None if channel_epilogue else stored,
        stored if channel_epilogue else None,
        bias,
        case.size_n,
        case.size_k,
        tiling,
    )
    assert got.shape == (m, case.size_n) and got.dtype == torch.bfloat16
    expected, allowed = _reference(x, packed, stored, bias, case, channel_epilogue)
    _assert_within_rounding(got, expected, allowed)


def test_without_bias_and_with_the_default_tiling():
    case = Case(200, 300, "block", seed=4)
    _, packed, stored, _ = build(case)
    x = torch.randn(70, case.size_k, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    got = fused.fused_linear(x, packed, stored, None, None, case.size_n, case.size_k)
    expected, allowed = _reference(x, packed, stored, None, case, False)
    _assert_within_rounding(got, expected, allowed)


def test_a_wrong_weight_is_caught_by_the_allowance():
    """The comparison is tight enough to see one swapped pair of weight rows."""
    case = Case(128, 256, "channel", seed=6)
    _, packed, stored, bias = build(case)
    x = torch.randn(8, case.size_k, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    expected, allowed = _reference(x, packed, stored, bias, case, False)
    got = fused.fused_linear(x, packed, stored, None, bias, case.size_n, case.size_k, SMALL)
    _assert_within_rounding(got, expected, allowed)
    with pytest.raises(AssertionError, match="rounding allowance"):
        _assert_within_rounding(got[:, [1, 0, *range(2, case.size_n)]], expected, allowed)


def test_no_tokens_give_an_empty_result():
    case = Case(64, 128, "channel")
    _, packed, stored, _ = build(case)
    x = torch.empty(0, case.size_k, dtype=torch.bfloat16)
    got = fused.fused_linear(x, packed, stored, None, None, case.size_n, case.size_k)
    assert got.shape == (0, case.size_n)


def test_odd_k_and_unaligned_activations_are_refused_so_the_caller_unpacks():
    case = Case(64, 129, "channel")
    _, packed, stored, _ = build(case)
    x = torch.zeros(4, case.size_k, dtype=torch.bfloat16)
    assert not fused.supported(x, stored)
    with pytest.raises(ValueError, match="even K"):
        fused.fused_linear(x, packed, stored, None, None, case.size_n, case.size_k)
    shifted = torch.zeros(4 * 128 + 1, dtype=torch.bfloat16)[1:].view(4, 128)
    assert not fused.supported(shifted, None)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_rare_scales_are_refused_so_the_caller_unpacks():
    case = Case(128, 256, "block", seed=7)
    _, packed, stored, _ = build(case)
    stored.view(torch.int16)[0, 5] = 0x7FC1  # a NaN: only the unpack's integer path keeps it
    assert not fused.supported(torch.zeros(4, case.size_k, dtype=torch.bfloat16), stored)
    x = torch.zeros(4, case.size_k, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="ordinary scales"):
        fused.fused_linear(x, packed, stored, None, None, case.size_n, case.size_k)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"x": lambda x: x.float()}, "bfloat16"),
        ({"x": lambda x: x[:, :-1].contiguous()}, "columns"),
        ({"channel": lambda s: s}, "not both"),
        ({"bias": lambda b: b[:-1]}, "bias must hold"),
    ],
)
def test_rejects_inputs_it_cannot_use(change, message):
    case = Case(100, 300, "channel")
    _, packed, stored, bias = build(case)
    x = torch.zeros(4, case.size_k, dtype=torch.bfloat16)
    x = change.get("x", lambda v: v)(x)
    channel = change["channel"](stored) if "channel" in change else None
    bias = change.get("bias", lambda v: v)(bias)
    with pytest.raises(ValueError, match=message):
        fused.fused_linear(x, packed, stored, channel, bias, case.size_n, case.size_k)
