"""marlin_reference (vLLM's preparation restated for benchmarks and GPU tests) against layout's
independent reference, on the CPU: the parts that need no Marlin op must agree exactly."""

from __future__ import annotations

import pytest
import torch

from vllm_dualpath import layout, marlin_reference

SHAPES = [(4096, 4096), (2880, 2880), (1000, 5120), (4100, 5120), (64, 128), (192, 320)]


@pytest.mark.parametrize(("n", "k"), SHAPES)
@pytest.mark.parametrize("group_size", [-1, 128])
def test_padding_choice_agrees(n, k, group_size) -> None:
    assert marlin_reference.marlin_padded_nk(n, k, group_size) == layout.marlin_padded_nk(
        n, k, group_size
    )


@pytest.mark.parametrize("group_size", [-1, 128])
def test_scale_and_bias_permutations_agree(group_size) -> None:
    size_k, size_n = 512, 256
    rows = 1 if group_size == -1 else size_k // group_size
    scales = torch.randn(rows, size_n).to(torch.bfloat16)
    assert torch.equal(
        marlin_reference.marlin_permute_scales(scales, size_k, size_n, group_size),
        layout.permute_scales(scales, size_k, size_n, group_size),
    )
    bias = torch.randn(size_n).to(torch.bfloat16)
    assert torch.equal(marlin_reference.marlin_permute_bias(bias), layout.permute_bias(bias))


@pytest.mark.parametrize(("n", "k", "block"), [(192, 256, None), (200, 384, (128, 128))])
def test_dequantized_weight_agrees_with_the_layout_reference(n, k, block) -> None:
    generator = torch.Generator().manual_seed(5)
    weight = marlin_reference.random_fp8_weight(n, k, "cpu", generator)
    scale = marlin_reference.random_scales(n, k, block, "cpu", generator)
    packed, stored, _ = layout.prepare_reference(weight, scale, None, block)
    expected = layout.dequantize_reference(packed, stored, n, k)
    got = marlin_reference.dequantize_fp8(weight, scale, block)
    assert torch.equal(got.view(torch.int16), expected.view(torch.int16))


def test_random_weights_have_no_nan_codes_and_cover_the_range() -> None:
    weight = marlin_reference.random_fp8_weight(256, 256, "cpu", torch.Generator().manual_seed(1))
    codes = weight.view(torch.uint8)
    assert not ((codes & 0x7F) == 0x7F).any()
    assert len(torch.unique(codes)) == 254


def test_scalar_type_id_is_vllms_float8_e4m3fn() -> None:
    # exponent 4, mantissa 3, signed, bias 0, finite-only, NaN as extended-range max/min:
    # scalar_types.float8_e4m3fn.id as vLLM 0.33.0's scalar_type.py computes it.
    assert marlin_reference.FP8_E4M3FN_TYPE_ID == 2814749767172868
