"""Measure, on this GPU, from which M unpack + cuBLAS beats Marlin for each dense shape.

    python -m vllm_dualpath.calibrate --out /etc/vllm-dualpath/calibration.json \\
        --shapes 7168x5120,5120x6144,1536x5120

Per shape, the smallest M of the grid from which unpack + cuBLAS is faster at every larger M,
timed side by side (``timing``); a shape where Marlin always wins gets twice the grid's largest M.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from vllm_dualpath import calibration, op, scratch, settings, timing
from vllm_dualpath.marlin_reference import (
    MARLIN_LIBRARY_ENV,
    MarlinFp8Layer,
    apply_fp8_marlin_linear,
    load_marlin_library,
    marlin_linear,
    prepare_fp8_for_marlin,
    random_fp8_weight,
    random_scales,
)


@dataclass(frozen=True)
class Shape:
    """One dense layer of a tensor-parallel rank: out features N, in features K."""

    name: str
    n: int
    k: int

    @property
    def key(self) -> str:
        return f"{self.n}x{self.k}"


# A TP2 rank of a GLM-4.5/4.6-class MoE model (hidden 5120, 96 query and 8 KV heads of 128,
# shared expert 1536, dense MLP 12288, vocabulary 151552), plus shapes Marlin must pad: the
# default shapes of the calibration and of the benchmarks.
SHAPES = (
    Shape("qkv_proj", 7168, 5120),
    Shape("o_proj", 5120, 6144),
    Shape("shared_gate_up", 1536, 5120),
    Shape("shared_down", 5120, 768),
    Shape("dense_gate_up", 12288, 5120),
    Shape("lm_head", 75776, 5120),
    Shape("odd_k_2880", 2880, 2880),
    Shape("odd_n_4100", 4100, 5120),
)

# FP8 bytes the rotated weight sets span: several times a Hopper L2, so no weight is timed from it.
ROTATION_BYTES = 256 << 20
MAX_WEIGHT_SETS = 64

# Denser where crossovers lie (docs/perf/dualpath-h200.md). A measured shape decides every M
# above the small threshold, so the grid runs past the large one.
M_GRID = (24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)


def weight_set_count(n: int, k: int) -> int:
    return max(2, min(MAX_WEIGHT_SETS, math.ceil(ROTATION_BYTES / (n * k))))


def log(message: str) -> None:
    """Progress for the measuring commands, on stderr (their results go to files)."""
    print(message, file=sys.stderr, flush=True)


def require_gpu_and_marlin(marlin_lib: str | None, command: str) -> None:
    """Stop with a message naming the command unless a CUDA GPU and vLLM's Marlin ops are here."""
    if not torch.cuda.is_available():
        raise SystemExit(f"{command} needs a CUDA GPU")
    if not load_marlin_library(marlin_lib):
        raise SystemExit(
            f"Marlin ops not found: set {MARLIN_LIBRARY_ENV} or pass --marlin-lib (the library "
            "tools/marlin/build.py builds), or run where vLLM is installed"
        )


def configure_overlay(
    table_path: Path | None, channel_scale: str | None = None
) -> settings.Settings:
    """Settings from the environment, this calibration table, and the reference Marlin call."""
    current = settings.load()
    if channel_scale is not None:
        current = replace(current, channel_scale=channel_scale)
    table = calibration.load(table_path) if table_path is not None else None
    op.configure(current, table)
    op.install_marlin_apply(apply_fp8_marlin_linear)
    return current


def marlin_layers(
    n: int,
    k: int,
    count: int,
    block_size: tuple[int, int] | None,
    generator: torch.Generator,
) -> list[MarlinFp8Layer]:
    """``count`` random FP8 layers of N x K, prepared for Marlin as vLLM prepares them."""
    layers = []
    for _ in range(count):
        weight = random_fp8_weight(n, k, "cuda", generator)
        scale = random_scales(n, k, block_size, "cuda", generator)
        layers.append(prepare_fp8_for_marlin(weight, scale, block_size))
        del weight
    return layers


def marlin_call(layer: MarlinFp8Layer, x: torch.Tensor) -> Callable[[], object]:
    """vLLM's Marlin call on ``x``, ready for graph capture."""
    return lambda: marlin_linear(x, layer)


def unpack_call(layer: MarlinFp8Layer, x: torch.Tensor, channel_scale: str) -> Callable[[], object]:
    """The overlay's unpack into its scratch buffer, then cuBLAS, ready for graph capture."""
    buffer = scratch.acquire(x.device, layer.size_n * layer.size_k)

    def call() -> torch.Tensor:
        return op.unpack_linear(
            x,
            layer.qweight,
            layer.scales,
            layer.size_n,
            layer.size_k,
            layer.bias,
            buffer,
            channel_scale,
        )

    return call


def crossover(
    marlin_us: Sequence[float], unpack_us: Sequence[float], m_grid: Sequence[int]
) -> int | None:
    """Smallest M of the grid from which the unpack path wins at every larger M too."""
    threshold = None
    for m, marlin, unpacked in reversed(list(zip(m_grid, marlin_us, unpack_us, strict=True))):
        if unpacked >= marlin:
            break
        threshold = m
    return threshold


def unpack_from_m(found: int | None, m_grid: Sequence[int]) -> int:
    """The table's threshold for a shape: its crossover, or, where Marlin won at every M of the
    grid, twice the grid's largest M (larger batches were not measured)."""
    return found if found is not None else 2 * max(m_grid)


def calibrate_shape(
    n: int,
    k: int,
    m_grid: Sequence[int],
    block_size: tuple[int, int] | None,
    channel_scale: str,
    budget_s: float,
    generator: torch.Generator,
) -> int | None:
    layers = marlin_layers(n, k, weight_set_count(n, k), block_size, generator)
    marlin_us, unpack_us = [], []
    for m in m_grid:
        x = torch.randn(m, k, device="cuda", generator=generator).to(torch.bfloat16)
        medians = timing.median_call_us_side_by_side(
            {
                "marlin": [marlin_call(layer, x) for layer in layers],
                "unpack_cublas": [unpack_call(layer, x, channel_scale) for layer in layers],
            },
            budget_s,
        )
        marlin_us.append(medians["marlin"])
        unpack_us.append(medians["unpack_cublas"])
        log(
            f"    M={m:<5d} marlin {marlin_us[-1]:8.1f} us  unpack+cublas {unpack_us[-1]:8.1f} us"
            f"  ratio {unpack_us[-1] / marlin_us[-1]:.2f}"
        )
    del layers
    torch.cuda.empty_cache()
    return crossover(marlin_us, unpack_us, m_grid)


def parse_shapes(text: str | None) -> list[tuple[int, int]]:
    if not text:
        return [(s.n, s.k) for s in SHAPES]
    shapes = []
    for item in text.split(","):
        n, _, k = item.lower().partition("x")
        shapes.append((int(n), int(k)))
    return shapes


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vllm_dualpath.calibrate", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--out", type=Path, required=True, help="calibration table to write")
    parser.add_argument(
        "--shapes",
        help="NxK per layer, comma-separated (default: a GLM-4.5-class TP2 rank)",
    )
    parser.add_argument("--marlin-lib", help="Marlin library from tools/marlin/build.py")
    parser.add_argument("--scales", choices=("block", "channel"), default="block")
    parser.add_argument("--channel-scale", choices=("epilogue", "unpack"))
    parser.add_argument("--budget-s", type=float, default=timing.DEFAULT_BUDGET_S)
    args = parser.parse_args(argv)
    require_gpu_and_marlin(args.marlin_lib, "calibration")

    current = configure_overlay(None, args.channel_scale)
    m_grid = [m for m in M_GRID if m > current.small_m_max] or [current.large_m_min]
    block = (128, 128) if args.scales == "block" else None
    generator = torch.Generator(device="cuda")
    generator.manual_seed(0)
    gpu = torch.cuda.get_device_name()
    shapes = parse_shapes(args.shapes)
    thresholds: dict[tuple[int, int], int] = {}
    for index, (n, k) in enumerate(shapes, 1):
        log(f"[{index}/{len(shapes)}] N={n} K={k}")
        found = calibrate_shape(
            n, k, m_grid, block, current.channel_scale, args.budget_s, generator
        )
        thresholds[(n, k)] = unpack_from_m(found, m_grid)
        verdict = "unpack" if found else "Marlin wins over the whole grid; unpack"
        log(f"    {verdict} from M={thresholds[(n, k)]}")
    table = calibration.CalibrationTable(
        unpack_from_m=thresholds, default_unpack_from_m=None, gpu=gpu
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(calibration.dump(table) + "\n", encoding="utf-8")
    log(
        f"wrote {args.out} ({len(thresholds)} shapes); "
        f"thresholds {settings.SMALL_M_MAX}={current.small_m_max} "
        f"{settings.LARGE_M_MIN}={current.large_m_min} apply to shapes not listed"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
