"""Benchmark the dual path against BF16 cuBLAS, Marlin FP8 and unpack + cuBLAS on this GPU.

    PYTHONPATH=src python benchmarks/bench.py --calibration table.json --out dualpath.json

Per shape and M, the four paths of ``bench_paths`` side by side (``vllm_dualpath.timing``), plus
device copy and unpack bandwidth. The paths are replayed in a fresh order every round: in a fixed
order each path inherits the one before it, which moved ratios by 2-9% (``--order fixed`` as
results up to docs/perf/dualpath-h200.md were timed; docs/perf/replay-order-h100.md). Progress
goes to stderr; the JSON is rewritten after each shape.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from bench_paths import PATHS, make_weight_sets, median_call_us, path_factories, unpack_only_us
from vllm_dualpath import timing
from vllm_dualpath.calibrate import (
    SHAPES,
    Shape,
    configure_overlay,
    log,
    require_gpu_and_marlin,
    weight_set_count,
)

M_VALUES = (1, 2, 4, 8, 16, 20, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def copy_bandwidth_gbps(nbytes: int = 2 << 30, repeats: int = 20) -> float:
    """Device-to-device copy bandwidth, bytes read plus written: the best of an eager `copy_`
    and an SM copy kernel in a graph, where a memcpy node can run slower than eagerly."""
    count = nbytes // 2
    source = torch.empty(count, dtype=torch.bfloat16, device="cuda").normal_()
    target = torch.empty_like(source)
    moved = 2 * count * source.element_size()
    target.copy_(source)
    torch.cuda.synchronize()
    eager = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        target.copy_(source)
        end.record()
        end.synchronize()
        eager.append(start.elapsed_time(end) / 1e3)
    kernel_us = median_call_us([lambda: torch.neg(source, out=target)], budget_s=0.3)
    best_s = min(statistics.median(eager), kernel_us * 1e-6)
    return moved / best_s / 1e9


def gpu_name() -> str:
    return torch.cuda.get_device_name()


def run(
    shapes: Sequence[Shape],
    m_values: Sequence[int],
    paths: Sequence[str],
    block_size: tuple[int, int] | None,
    channel_scale: str,
    budget_s: float,
    out: Path,
    order: str = "shuffled",
) -> dict[str, object]:
    started = time.monotonic()
    copy_gbps = copy_bandwidth_gbps()
    log(f"{gpu_name()}: device copy {copy_gbps:.0f} GB/s (read + write)")
    rows: list[dict[str, object]] = []
    unpack_gbps: dict[str, float] = {}
    generator = torch.Generator(device="cuda")
    generator.manual_seed(0)
    factories = path_factories(channel_scale)
    result: dict[str, object] = {}
    for index, shape in enumerate(shapes, 1):
        count = weight_set_count(shape.n, shape.k)
        weights = make_weight_sets(shape.n, shape.k, count, block_size, generator)
        log(f"[{index}/{len(shapes)}] {shape.name} N={shape.n} K={shape.k}: {count} weight sets")
        if "unpack_cublas" in paths:
            unpack_us = unpack_only_us(weights, budget_s, channel_scale)
            # 1 byte read and 2 written per element of the weight.
            unpack_gbps[shape.key] = 3 * shape.n * shape.k / (unpack_us * 1e-6) / 1e9
            log(
                f"    unpack {unpack_us:8.1f} us = {unpack_gbps[shape.key]:.0f} GB/s "
                f"({unpack_gbps[shape.key] / copy_gbps:.0%} of copy)"
            )
        for m in m_values:
            x = torch.randn(m, shape.k, device="cuda", generator=generator).to(torch.bfloat16)
            medians = timing.median_call_us_side_by_side(
                {path: [factories[path](w, x) for w in weights] for path in paths},
                budget_s,
                order=order,
                seed=m,
            )
            rows.extend(
                {"n": shape.n, "k": shape.k, "m": m, "path": path, "median_us": medians[path]}
                for path in paths
            )
            log(f"    M={m:<6d} " + progress_line(medians))
            del x
        del weights
        torch.cuda.empty_cache()
        # Written after every shape, so an interrupted run still leaves its measurements.
        result = {
            "gpu": gpu_name(),
            "order": order,
            "copy_gbps": copy_gbps,
            "unpack_gbps": unpack_gbps,
            "rows": rows,
        }
        out.write_text(json.dumps(result, indent=1) + "\n")
    log(f"done in {time.monotonic() - started:.0f} s")
    return result


def progress_line(medians: dict[str, float]) -> str:
    parts = [f"{path} {us:9.1f} us" for path, us in medians.items()]
    if "bf16" in medians:
        parts += [
            f"{path}/bf16 {medians[path] / medians['bf16']:.2f}"
            for path in medians
            if path != "bf16"
        ]
    if "dualpath" in medians and "marlin" in medians:
        parts.append(f"dualpath/marlin {medians['dualpath'] / medians['marlin']:.2f}")
    return "  ".join(parts)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON results file")
    parser.add_argument("--calibration", type=Path, help="calibration table for the dual path")
    parser.add_argument("--marlin-lib", help="Marlin library from tools/marlin/build.py")
    parser.add_argument("--paths", default=",".join(PATHS), help=f"subset of {','.join(PATHS)}")
    parser.add_argument("--shapes", help="comma-separated shape names (default: all)")
    parser.add_argument("--m", help="comma-separated M values (default: 1..16384)")
    parser.add_argument(
        "--scales",
        choices=("block", "channel"),
        default="block",
        help="128x128 block scales (FP8 checkpoints' usual form) or per-channel",
    )
    parser.add_argument(
        "--channel-scale",
        choices=("epilogue", "unpack"),
        help="where channel-wise scales go on the unpack path (default: the overlay's setting)",
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=timing.DEFAULT_BUDGET_S,
        help="timed replay seconds per measurement",
    )
    parser.add_argument(
        "--order",
        choices=timing.ORDERS,
        default="shuffled",
        help="replay the paths in a fresh order every round, or in --paths' order every round",
    )
    return parser.parse_args(argv)


def select_shapes(names: str | None) -> list[Shape]:
    if not names:
        return list(SHAPES)
    by_name = {s.name: s for s in SHAPES}
    unknown = [n for n in names.split(",") if n not in by_name]
    if unknown:
        raise SystemExit(f"unknown shapes {unknown}; known: {', '.join(by_name)}")
    return [by_name[n] for n in names.split(",")]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    require_gpu_and_marlin(args.marlin_lib, "the benchmark")
    paths = [p for p in args.paths.split(",") if p]
    if unknown := [p for p in paths if p not in PATHS]:
        raise SystemExit(f"unknown paths {unknown}; known: {', '.join(PATHS)}")
    if "dualpath" in paths and args.calibration is None:
        log("no --calibration: the dual path uses Marlin between its two thresholds")
    current = configure_overlay(args.calibration, args.channel_scale)
    m_values = [int(m) for m in args.m.split(",")] if args.m else list(M_VALUES)
    block = (128, 128) if args.scales == "block" else None
    args.out.parent.mkdir(parents=True, exist_ok=True)
    run(
        select_shapes(args.shapes),
        m_values,
        paths,
        block,
        current.channel_scale,
        args.budget_s,
        args.out,
        args.order,
    )
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
