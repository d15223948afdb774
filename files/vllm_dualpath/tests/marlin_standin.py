"""A stand-in for vLLM's apply_fp8_marlin_linear on machines without a GPU (Marlin is CUDA-only).

Marlin's arithmetic in plain PyTorch from the reference layout, rounding where Marlin rounds
(package README, "Where the scale goes"). Tests only.
"""

from __future__ import annotations

import torch

from vllm_dualpath import layout


class MarlinStandIn:
    """Callable with apply_fp8_marlin_linear's keyword arguments; counts its calls."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(
        self,
        *,
        input: torch.Tensor,
        weight: torch.Tensor,
        weight_scale: torch.Tensor,
        workspace: torch.Tensor | None,
        size_n: int,
        size_k: int,
        bias: torch.Tensor | None,
        use_fp32_reduce: bool = True,
    ) -> torch.Tensor:
        x = input.reshape(-1, input.shape[-1])
        self.calls.append(x.shape[0])
        return reference_linear(x, weight, weight_scale, size_n, size_k, bias).reshape(
            *input.shape[:-1], size_n
        )


def reference_linear(
    x: torch.Tensor,
    packed: torch.Tensor,
    stored_scales: torch.Tensor,
    size_n: int,
    size_k: int,
    stored_bias: torch.Tensor | None,
) -> torch.Tensor:
    """Marlin's arithmetic: exact products, one rounding of the scaled sum, then the bias."""
    if stored_scales.shape[0] == 1:
        weight = layout.dequantize_reference(packed, None, size_n, size_k).double()
        scales = layout.true_scales(layout.unpermute_scales(stored_scales))[0, :size_n]
        out = (x.double() @ weight.t()) * scales
    else:
        weight = layout.dequantize_reference(packed, stored_scales, size_n, size_k).double()
        out = x.double() @ weight.t()
    out = out.to(x.dtype)
    if stored_bias is not None:
        out = out + layout.unpermute_channels(stored_bias)[:size_n]
    return out
