"""The overlay's unpack against the real repack: the dequantized weight, bit for bit."""

from __future__ import annotations

import pytest
import torch
from gpu_shapes import ALL, shape_id

from vllm_dualpath import layout, unpack
from vllm_dualpath.marlin_reference import (
    dequantize_fp8,
    prepare_fp8_for_marlin,
    random_fp8_weight,
    random_scales,
)


def _poisoned(numel: int) -> torch.Tensor:
    # Spare room past the end too: a write outside [n, k] would land in NaN, not in the result.
    return torch.full((numel + 4096,), float("nan"), dtype=torch.bfloat16, device="cuda")


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16)


@pytest.mark.parametrize("shape", ALL, ids=shape_id)
def test_unpack_with_scales_is_bit_exact(shape, generator) -> None:
    n, k, block = shape
    weight = random_fp8_weight(n, k, "cuda", generator)
    scale = random_scales(n, k, block, "cuda", generator)
    layer = prepare_fp8_for_marlin(weight, scale, block)
    buffer = _poisoned(n * k)
    expected = dequantize_fp8(weight, scale, block)

    # The second call repeats the first one's launch directly (``unpack._known_launches``).
    for call in ("first", "repeated"):
        buffer.fill_(float("nan"))
        got = unpack.unpack_weight(layer.qweight, layer.scales, n, k, out=buffer)
        assert got.shape == (n, k)
        assert not got.isnan().any(), f"{call}: unwritten (poisoned) elements in the weight"
        mismatches = (_bits(got) != _bits(expected)).sum().item()
        assert mismatches == 0, f"{call}: {mismatches} of {n * k} elements differ from the dequant"
        assert buffer[n * k :].isnan().all(), f"{call}: the unpack wrote past its output"
    assert unpack.launches_known() > 0


@pytest.mark.parametrize(("k_tiles", "num_warps", "k_fastest"), [(4, 4, False), (16, 4, True)])
@pytest.mark.parametrize("shape", ALL, ids=shape_id)
def test_other_tilings_and_grid_order_give_the_same_bits(
    shape, k_tiles, num_warps, k_fastest, generator
) -> None:
    """Tiles per program, warps and grid order set the speed only: 4 tiles (and the default 8)
    share one row of 128-block scales per program, 16 span two."""
    n, k, block = shape
    weight = random_fp8_weight(n, k, "cuda", generator)
    scale = random_scales(n, k, block, "cuda", generator)
    layer = prepare_fp8_for_marlin(weight, scale, block)
    got = unpack.unpack_weight(
        layer.qweight,
        layer.scales,
        n,
        k,
        out=_poisoned(n * k),
        k_tiles=k_tiles,
        num_warps=num_warps,
        k_fastest=k_fastest,
    )
    assert torch.equal(_bits(got), _bits(dequantize_fp8(weight, scale, block)))


def test_scales_changed_in_place_get_their_own_launch(generator) -> None:
    """A repeated launch is keyed on the scales' verdict too: an infinite scale written in place
    turns on the kernel's check for rare scales, as a first launch would."""
    n, k, block = 512, 1024, (128, 128)
    weight = random_fp8_weight(n, k, "cuda", generator)
    layer = prepare_fp8_for_marlin(weight, random_scales(n, k, block, "cuda", generator), block)
    buffer = _poisoned(n * k)
    unpack.unpack_weight(layer.qweight, layer.scales, n, k, out=buffer)
    known = unpack.launches_known()
    layer.scales.view(torch.int16)[0, 3] = 0x7F80  # +inf
    got = unpack.unpack_weight(layer.qweight, layer.scales, n, k, out=buffer)
    assert unpack.launches_known() == known + 1
    dispatched = unpack.unpack_weight(layer.qweight, layer.scales, n, k)  # no out: never direct
    assert got.isinf().any()
    assert torch.equal(_bits(got), _bits(dispatched))


@pytest.mark.parametrize("shape", [s for s in ALL if s[2] is None], ids=shape_id)
def test_unpack_without_scales_gives_the_fp8_values(shape, generator) -> None:
    n, k, _ = shape
    weight = random_fp8_weight(n, k, "cuda", generator)
    layer = prepare_fp8_for_marlin(weight, random_scales(n, k, None, "cuda", generator))
    got = unpack.unpack_weight(layer.qweight, None, n, k, out=_poisoned(n * k))
    assert torch.equal(_bits(got), _bits(weight.to(torch.bfloat16)))


@pytest.mark.parametrize("shape", ALL, ids=shape_id)
def test_cpu_reference_repack_matches_the_real_one(shape, generator) -> None:
    """layout.py's reference (what the CPU tests rely on) builds the same bytes as vLLM."""
    n, k, block = shape
    weight = random_fp8_weight(n, k, "cuda", generator)
    scale = random_scales(n, k, block, "cuda", generator)
    bias = torch.randn(n, device="cuda", generator=generator).to(torch.bfloat16)
    real = prepare_fp8_for_marlin(weight, scale, block, bias)

    packed, stored, stored_bias = layout.prepare_reference(
        weight.cpu(), scale.cpu(), bias.cpu(), block
    )
    assert torch.equal(packed, real.qweight.cpu())
    assert torch.equal(_bits(stored), _bits(real.scales.cpu()))
    assert stored_bias is not None and real.bias is not None
    assert torch.equal(_bits(stored_bias), _bits(real.bias.cpu()))
