"""The Marlin layout facts the overlay relies on, checked against the real gptq_marlin_repack."""

from __future__ import annotations

import pytest
import torch
from gpu_shapes import ALL, shape_id
from marlin_inverse import marlin_bytes_to_weight, marlin_scales_to_true

from vllm_dualpath.marlin_reference import (
    dequantize_fp8,
    expand_scales,
    marlin_linear,
    marlin_padded_nk,
    prepare_fp8_for_marlin,
    random_fp8_weight,
    random_scales,
)


@pytest.mark.parametrize("shape", ALL, ids=shape_id)
def test_byte_layout_inverse_recovers_the_weight(shape, generator) -> None:
    n, k, block = shape
    weight = random_fp8_weight(n, k, "cuda", generator)
    layer = prepare_fp8_for_marlin(weight, random_scales(n, k, block, "cuda", generator), block)
    padded_n, padded_k = marlin_padded_nk(n, k, layer.group_size)
    assert layer.padded_nk == (padded_n, padded_k)
    assert layer.qweight.shape == (padded_k // 16, 4 * padded_n)

    recovered = marlin_bytes_to_weight(layer.qweight).view(torch.uint8)
    assert torch.equal(recovered[:n, :k], weight.view(torch.uint8))
    assert not recovered[n:, :].any() and not recovered[:, k:].any(), "padding must be zero"


@pytest.mark.parametrize("shape", ALL, ids=shape_id)
def test_scale_permutation_inverse_recovers_the_scales(shape, generator) -> None:
    n, k, block = shape
    scale = random_scales(n, k, block, "cuda", generator)
    layer = prepare_fp8_for_marlin(random_fp8_weight(n, k, "cuda", generator), scale, block)
    _, padded_k = layer.padded_nk
    true = marlin_scales_to_true(layer.scales, padded_k, layer.group_size)
    expected = expand_scales(scale.to(torch.bfloat16), n, k, block).to(torch.bfloat16)
    assert true.dtype == torch.bfloat16
    assert torch.equal(true[: expected.shape[0], :n], expected)


@pytest.mark.parametrize("shape", ALL, ids=shape_id)
def test_marlin_matches_dequantized_reference(shape, generator) -> None:
    n, k, block = shape
    weight = random_fp8_weight(n, k, "cuda", generator)
    scale = random_scales(n, k, block, "cuda", generator)
    bias = torch.randn(n, device="cuda", generator=generator).to(torch.bfloat16)
    layer = prepare_fp8_for_marlin(weight, scale, block, bias)
    dense = dequantize_fp8(weight, scale, block)
    x = torch.randn(37, k, device="cuda", generator=generator).to(torch.bfloat16)

    out = marlin_linear(x, layer)
    reference = x.double() @ dense.double().t() + bias.double()
    assert out.shape == (37, n)
    assert not out.isnan().any()
    error = (out.double() - reference).norm() / reference.norm()
    assert error <= 1e-2, f"Marlin vs float64 reference: {error:.2e}"
