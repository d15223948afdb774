"""vLLM's FP8 Marlin (W8A16) apply, as a CPU test double with vLLM 0.34.0's signature.

Marlin is a CUDA kernel; here its arithmetic comes from the overlay tests' reference
(``marlin_standin.reference_linear``: exact products, the scaled sum rounded once to BF16, then
the bias), the same function the overlay's own tests hold both paths of the op against.
"""

from __future__ import annotations

import torch
from marlin_standin import reference_linear

# vLLM's marlin_utils.USE_FP32_REDUCE_DEFAULT; the overlay reads this parameter's default.
USE_FP32_REDUCE_DEFAULT = True


def apply_fp8_marlin_linear(
    input: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    workspace: torch.Tensor | None,
    size_n: int,
    size_k: int,
    bias: torch.Tensor | None,
    use_fp32_reduce: bool = USE_FP32_REDUCE_DEFAULT,
) -> torch.Tensor:
    """input[..., size_k] @ W.T (+ bias) for a Marlin-packed FP8 weight, as Marlin computes it.

    ``workspace`` (Marlin's locks) and ``use_fp32_reduce`` (its split-K reduction) change
    nothing on the CPU: the reference sums in float64 and rounds once.
    """
    x = input.reshape(-1, input.shape[-1])
    output = reference_linear(x, weight, weight_scale, size_n, size_k, bias)
    return output.reshape(*input.shape[:-1], size_n)
