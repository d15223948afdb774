"""vLLM's Marlin FP8 scaled-mm kernel class, reduced to what the lab's model calls.

As in vLLM 0.33/0.34, ``apply_weights`` calls ``apply_fp8_marlin_linear`` through the name this
module imported: the overlay's plugin checks that and rebinds the name here too.
"""

from __future__ import annotations

from typing import Protocol

import torch

from vllm.model_executor.layers.quantization.utils.marlin_utils_fp8 import (
    apply_fp8_marlin_linear,
)


class FP8Layer(Protocol):
    """What vLLM's linear layers hold after prepare_fp8_layer_for_marlin (plus the scales,
    named weight_scale or, block-quantized, weight_scale_inv)."""

    @property
    def weight(self) -> torch.Tensor: ...

    @property
    def output_size_per_partition(self) -> int: ...

    @property
    def input_size_per_partition(self) -> int: ...


class MarlinFP8ScaledMMLinearKernel:
    """Weight-only FP8 linear through Marlin; layers hold vLLM's post-loading attributes."""

    def __init__(self, block_quant: bool) -> None:
        self.block_quant = block_quant

    @staticmethod
    def _block_scale_name(layer: FP8Layer) -> str:
        # Block-quantized checkpoints name their scales weight_scale_inv.
        if getattr(layer, "weight_scale_inv", None) is not None:
            return "weight_scale_inv"
        return "weight_scale"

    def apply_weights(
        self,
        layer: FP8Layer,
        x: torch.Tensor,
        bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        name = self._block_scale_name(layer) if self.block_quant else "weight_scale"
        weight_scale: torch.Tensor = getattr(layer, name)
        return apply_fp8_marlin_linear(
            input=x,
            weight=layer.weight,
            weight_scale=weight_scale,
            workspace=None,
            size_n=layer.output_size_per_partition,
            size_k=layer.input_size_per_partition,
            bias=bias,
        )
