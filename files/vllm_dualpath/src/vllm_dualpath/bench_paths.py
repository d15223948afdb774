"""The four ways the benchmark runs one dense layer, each as a closure ready for graph capture."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from vllm_dualpath import timing
from vllm_dualpath.marlin_reference import (
    MarlinFp8Layer,
    dequantize_fp8,
    marlin_linear,
    prepare_fp8_for_marlin,
    random_fp8_weight,
    random_scales,
)

PATHS = ("bf16", "marlin", "unpack_cublas", "dualpath")


@dataclass(frozen=True)
class WeightSet:
    """One layer's weight in both forms: Marlin FP8 (what serves) and dense BF16 (the baseline)."""

    marlin: MarlinFp8Layer
    dense: torch.Tensor  # BF16 [N, K], the exact dequantized Marlin weight


def make_weight_sets(
    n: int,
    k: int,
    count: int,
    block_size: tuple[int, int] | None,
    generator: torch.Generator,
) -> list[WeightSet]:
    sets = []
    for _ in range(count):
        weight = random_fp8_weight(n, k, "cuda", generator)
        scale = random_scales(n, k, block_size, "cuda", generator)
        sets.append(
            WeightSet(prepare_fp8_for_marlin(weight, scale, block_size),
                      dequantize_fp8(weight, scale, block_size))
        )
    return sets


PathFactory = Callable[[WeightSet, torch.Tensor], Callable[[], object]]


def _bf16(w: WeightSet, x: torch.Tensor) -> Callable[[], object]:
    return lambda: torch.nn.functional.linear(x, w.dense)


def _marlin(w: WeightSet, x: torch.Tensor) -> Callable[[], object]:
    return lambda: marlin_linear(x, w.marlin)


class Paths:
    """Factories for the requested paths, plus the unpack timed on its own."""

    def __init__(self, paths: Sequence[str]) -> None:
        self._factories: dict[str, PathFactory] = {"bf16": _bf16, "marlin": _marlin}
        self._wanted = tuple(paths)

    def factory(self, path: str) -> PathFactory:
        return self._factories[path]

    def unpack_only_us(self, weights: Sequence[WeightSet], budget_s: float) -> float | None:
        if "unpack_cublas" not in self._wanted:
            return None
        raise NotImplementedError


def build_paths(paths: Sequence[str]) -> Paths:
    return Paths(paths)


def use_calibration(table: Path | None) -> None:
    raise NotImplementedError


__all__ = ["PATHS", "PathFactory", "Paths", "WeightSet", "build_paths", "make_weight_sets",
           "timing", "use_calibration"]
