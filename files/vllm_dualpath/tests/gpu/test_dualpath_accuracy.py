"""Marlin and unpack + cuBLAS through the custom op: same results, no NaN, every element written."""

from __future__ import annotations

import pytest
import torch
from gpu_shapes import ALL, shape_id
from overlay_setup import force, poison_allocator

from vllm_dualpath.marlin_reference import (
    dequantize_fp8,
    prepare_fp8_for_marlin,
    random_fp8_weight,
    random_scales,
)

M_VALUES = (1, 20, 37, 300, 2048)


def _relative_error(got: torch.Tensor, reference: torch.Tensor) -> float:
    return ((got.double() - reference).norm() / reference.norm()).item()


@pytest.mark.parametrize("channel_scale", ["epilogue", "unpack"])
@pytest.mark.parametrize("shape", ALL, ids=shape_id)
def test_both_paths_agree_with_float64(shape, channel_scale, generator) -> None:
    n, k, block = shape
    weight = random_fp8_weight(n, k, "cuda", generator)
    scale = random_scales(n, k, block, "cuda", generator)
    bias = torch.randn(n, device="cuda", generator=generator).to(torch.bfloat16)
    layer = prepare_fp8_for_marlin(weight, scale, block, bias)
    dense = dequantize_fp8(weight, scale, block).double()

    for m in M_VALUES:
        x = torch.randn(m, k, device="cuda", generator=generator).to(torch.bfloat16)
        reference = x.double() @ dense.t() + bias.double()
        outputs = {}
        for path in ("marlin", "unpack"):
            force(path, channel_scale)
            poison_allocator()
            out = torch.ops.dualpath.fp8_marlin_linear(
                x, layer.qweight, layer.scales, None, n, k, layer.bias, True
            )
            torch.cuda.synchronize()
            assert out.shape == (m, n) and out.dtype == torch.bfloat16
            assert not out.isnan().any(), f"{path} M={m}: NaN (unwritten or invalid) elements"
            error = _relative_error(out, reference)
            assert error <= 1e-2, f"{path} M={m}: relative error {error:.2e} vs float64"
            outputs[path] = out
        between = _relative_error(outputs["unpack"], outputs["marlin"].double())
        assert between <= 1e-2, f"M={m}: unpack vs Marlin relative error {between:.2e}"
