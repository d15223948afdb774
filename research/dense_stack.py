"""The dense stack the W8A16 kernel measurements share: ``bench_model``'s dense step (sixteen
dense layers of a TP2 rank, forward order), each layer with its own FP8 weight and 128x128 block
scales, the two paths every measurement compares against (BF16 and the overlay's unpack + cuBLAS)
and the timing of a set of paths over the stack at one M, as ``power_floor`` times its paths."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import bench_model
import power_floor
import torch
from vllm_dualpath import unpack
from vllm_dualpath.calibrate import SHAPES, log
from vllm_dualpath.marlin_reference import (
    MarlinFp8Layer,
    dequantize_fp8,
    prepare_fp8_for_marlin,
    random_fp8_weight,
    random_scales,
)

BLOCK = 128  # the weight's scale blocks
ACCURACY_M = (1000, 1024)  # one M off the tiles, one on them
OUTLIER_CHANNELS = 7  # activation channels made 300x larger, as real hidden states have
MAX_ERROR_VS_CUBLAS = 1.5  # a kernel's error may be this many times BF16 cuBLAS's


@dataclass(frozen=True)
class Fp8Weight:
    """One dense layer: the FP8 weight [N, K], its 128x128 block scales (fp32 holding the BF16
    values the Marlin scales hold), the dequantized BF16 weight and the Marlin repack of both."""

    fp8: torch.Tensor
    block_scales: torch.Tensor
    dense: torch.Tensor
    marlin: MarlinFp8Layer

    @property
    def n(self) -> int:
        return int(self.fp8.shape[0])

    @property
    def k(self) -> int:
        return int(self.fp8.shape[1])

    @classmethod
    def random(cls, n: int, k: int, g: torch.Generator) -> Fp8Weight:
        fp8 = random_fp8_weight(n, k, "cuda", g)
        scales = random_scales(n, k, (BLOCK, BLOCK), "cuda", g)
        return cls(
            fp8,
            scales.to(torch.bfloat16).float(),
            dequantize_fp8(fp8, scales, (BLOCK, BLOCK)),
            prepare_fp8_for_marlin(fp8, scales, (BLOCK, BLOCK)),
        )

    def unrounded(self) -> torch.Tensor:
        """FP8 x block scale in fp32, before the BF16 rounding of ``dense``."""
        per_element = self.block_scales.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)
        return self.fp8.float() * per_element[: self.n, : self.k]


Linear = Callable[[torch.Tensor, Fp8Weight], torch.Tensor]


def random_stack(g: torch.Generator) -> list[Fp8Weight]:
    """The dense step's sixteen layers, four of each of ``bench_model.LAYER_SHAPES``."""
    by_name = {s.name: s for s in SHAPES}
    shapes = [by_name[name] for name in bench_model.LAYER_SHAPES] * 4
    return [Fp8Weight.random(s.n, s.k, g) for s in shapes]


def one_of_each_shape(stack: list[Fp8Weight]) -> list[Fp8Weight]:
    return stack[: len(bench_model.LAYER_SHAPES)]


def bf16_linear(x: torch.Tensor, weight: Fp8Weight) -> torch.Tensor:
    return torch.nn.functional.linear(x, weight.dense)


def unpack_linear(buffer: torch.Tensor) -> Linear:
    """The overlay's large-M path, unpacking into ``buffer``."""

    def linear(x: torch.Tensor, weight: Fp8Weight) -> torch.Tensor:
        layer = weight.marlin
        dense = unpack.unpack_weight(layer.qweight, layer.scales, weight.n, weight.k, out=buffer)
        return torch.nn.functional.linear(x, dense)

    return linear


def baseline_paths(stack: list[Fp8Weight]) -> dict[str, Linear]:
    buffer = torch.empty(max(w.n * w.k for w in stack), dtype=torch.bfloat16, device="cuda")
    return {"bf16": bf16_linear, "unpack_cublas": unpack_linear(buffer)}


def activations(m: int, k: int, g: torch.Generator) -> torch.Tensor:
    x = torch.randn(m, k, device="cuda", generator=g)
    x[:, :OUTLIER_CHANNELS] *= 300.0
    return x.to(torch.bfloat16)


def measure_m(
    gauge: power_floor.Gauge,
    stack: list[Fp8Weight],
    kernels: dict[str, Linear],
    m: int,
    window_s: float,
    turns: int,
    g: torch.Generator,
    more: Callable[[list[torch.Tensor]], dict[str, power_floor.Pass]] | None = None,
) -> dict[str, Any]:
    """Each kernel over the stack at M tokens, plus the passes ``more`` makes of the inputs."""
    inputs = [activations(m, w.k, g) for w in stack]
    layers = list(zip(inputs, stack, strict=True))
    runs: dict[str, power_floor.Pass] = {}
    for name, linear in kernels.items():

        def through(linear: Linear = linear) -> list[torch.Tensor]:
            return [linear(x, w) for x, w in layers]

        runs[name] = through
    if more is not None:
        runs |= more(inputs)
    row = {"m": m} | power_floor.measure_paths(gauge, runs, m, window_s, turns)
    log(f"  M={m}: " + power_floor.ratios_line(row["paths"]))
    return row
