"""Measure, on this GPU, from which M unpack + cuBLAS beats Marlin for each dense shape.

    python -m vllm_dualpath.calibrate --out /etc/vllm-dualpath/calibration.json \\
        --shapes 7168x5120,5120x6144,1536x5120

For every shape it times Marlin and the unpack path side by side (CUDA-graph replays, rotating
weight sets, medians) over a grid of M between the dispatcher's two thresholds, and records the
smallest grid M from which the unpack path is faster at that M and every larger one. The table
is written in the format vllm_dualpath.calibration reads. A listed shape decides every M above
the small threshold (the large one does not apply to it), so a shape where Marlin wins over the
whole grid is listed with twice the grid's largest M: it stays on Marlin over the grid and as far
again past it. Shapes not measured are not listed: the dispatcher's thresholds apply to them.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import torch

from vllm_dualpath import calibration, settings, timing
from vllm_dualpath.bench import SHAPES, weight_set_count
from vllm_dualpath.bench_paths import (
    configure_overlay,
    log,
    make_weight_sets,
    path_factories,
    require_gpu_and_marlin,
)

# Above the small-M threshold, denser where crossovers were seen (M = 64..2048 on an H200). A
# measured shape decides every M above the small threshold, so the grid runs past the large one.
M_GRID = (24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)


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
    weights = make_weight_sets(n, k, weight_set_count(n, k), block_size, generator)
    factories = path_factories(channel_scale)
    marlin_us, unpack_us = [], []
    for m in m_grid:
        x = torch.randn(m, k, device="cuda", generator=generator).to(torch.bfloat16)
        medians = timing.median_call_us_side_by_side(
            {p: [factories[p](w, x) for w in weights] for p in ("marlin", "unpack_cublas")},
            budget_s,
        )
        marlin_us.append(medians["marlin"])
        unpack_us.append(medians["unpack_cublas"])
        log(
            f"    M={m:<5d} marlin {marlin_us[-1]:8.1f} us  unpack+cublas {unpack_us[-1]:8.1f} us"
            f"  ratio {unpack_us[-1] / marlin_us[-1]:.2f}"
        )
    del weights
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
        "--shapes", help="NxK per layer, comma-separated (default: the benchmark's shapes)"
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
