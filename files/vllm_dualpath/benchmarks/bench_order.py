"""Large M: does the order of the replays make the dual path look slower than unpack + cuBLAS?

    PYTHONPATH=src:benchmarks python benchmarks/bench_order.py --out order.json
    PYTHONPATH=src:benchmarks python benchmarks/bench_order.py --report order.json \\
        --png order.png --markdown order.md

The op at large M in a CUDA graph runs what unpack + cuBLAS runs (the unpack into the scratch
buffer, then cuBLAS), so a gap between the two columns is either work the op adds or the
measurement. Per shape and M (default lm_head 75776x5120 at M = 8192 and 16384), side by side
in CUDA graphs: BF16, Marlin, unpack + cuBLAS and the op replayed in bench.py's order every round
('bench', as bench.py times them), the same order with the SM clock and board power read after
each replay ('bench_clocked'), the op and unpack + cuBLAS swapped ('swapped'), and all four plus
a second unpack + cuBLAS column in a fresh order every round ('shuffled'). Also: the kernels one
graph replay of unpack + cuBLAS and of the op runs, which path the op's calls took while it was
captured (call counts), and the scratch buffer's size before and after.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import result_cli

BENCH_PATHS = ("bf16", "marlin", "unpack_cublas", "dualpath")
# name: (paths in order, replay order, clocks read after each replay)
RUNS: dict[str, tuple[tuple[str, ...], str, bool]] = {
    "bench": (BENCH_PATHS, "fixed", False),
    "bench_clocked": (BENCH_PATHS, "fixed", True),
    "swapped": (("bf16", "marlin", "dualpath", "unpack_cublas"), "fixed", True),
    "shuffled": ((*BENCH_PATHS, "unpack_again"), "shuffled", True),
}
DEFAULT_SHAPES = "lm_head"
DEFAULT_M = (8192, 16384)
DEFAULT_BUDGET_S = 0.5


def rows_by_run(result: dict[str, Any]) -> dict[tuple[str, int, str], dict[str, dict[str, Any]]]:
    """Per (shape key, M, run): per path its median us, clock and power."""
    found: dict[tuple[str, int, str], dict[str, dict[str, Any]]] = {}
    for row in result["rows"]:
        key = (f"{row['n']}x{row['k']}", row["m"], row["run"])
        found.setdefault(key, {})[row["path"]] = row
    return found


def ratios(paths: dict[str, dict[str, Any]]) -> dict[str, float]:
    """The op against unpack + cuBLAS (the same kernels), each against BF16, and the second
    unpack + cuBLAS column against the first where there is one."""
    us = {path: row["median_us"] for path, row in paths.items()}
    found = {
        "dual_over_unpack": us["dualpath"] / us["unpack_cublas"],
        "dual_over_best": us["dualpath"] / min(us["unpack_cublas"], us["marlin"]),
        "unpack_over_bf16": us["unpack_cublas"] / us["bf16"],
        "dual_over_bf16": us["dualpath"] / us["bf16"],
    }
    if "unpack_again" in us:
        found["unpack_again_over_unpack"] = us["unpack_again"] / us["unpack_cublas"]
    return found


def _number(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def markdown(result: dict[str, Any]) -> str:
    machine = result["machine"]
    lines = [
        f"GPU: {machine['gpu']} ({machine['nvidia_smi']})",
        "",
        "| N x K | M | run | bf16 us | marlin us | unpack+cuBLAS us | dual us | dual / unpack "
        "| dual / best | unpack / bf16 | 2nd unpack / unpack | SM MHz after bf16, marlin, "
        "unpack, dual |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (key, m, run), paths in rows_by_run(result).items():
        r = ratios(paths)
        clocks = ", ".join(_number(paths[p].get("sm_clock_mhz"), ".0f") for p in BENCH_PATHS)
        lines.append(
            f"| {key} | {m} | {run} | "
            + " | ".join(f"{paths[p]['median_us']:.0f}" for p in BENCH_PATHS)
            + f" | {r['dual_over_unpack']:.3f} | {r['dual_over_best']:.3f} | "
            f"{r['unpack_over_bf16']:.3f} | {_number(r.get('unpack_again_over_unpack'), '.3f')} "
            f"| {clocks} |"
        )
    lines.append("")
    for key, probe in result["probes"].items():
        lines.append(
            f"{key}: kernels per graph replay the same for unpack + cuBLAS and the op: "
            f"{probe['kernels']['unpack_cublas'] == probe['kernels']['dualpath']} "
            f"({len(probe['kernels']['dualpath'])} each); the op's calls while captured: "
            f"{probe['calls_during_capture']}; scratch elements before / after: "
            f"{probe['scratch_before']} / {probe['scratch_after']}."
        )
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = rows_by_run(result)
    cells = sorted({(key, m) for key, m, _ in table})
    runs = [r for r in RUNS if any((c[0], c[1], r) in table for c in cells)]
    fig, axes = plt.subplots(len(cells), 2, figsize=(12, 3.6 * len(cells)), squeeze=False)
    colors = {"bf16": "black", "marlin": "tab:orange", "unpack_cublas": "tab:green"}
    colors |= {"dualpath": "tab:blue", "unpack_again": "tab:olive"}
    width = 0.8 / len(colors)
    for (time_axis, clock_axis), (key, m) in zip(axes, cells, strict=True):
        for index, path in enumerate(colors):
            offsets = [i + (index - (len(colors) - 1) / 2) * width for i in range(len(runs))]
            rows = [table.get((key, m, run), {}).get(path) for run in runs]
            bf16 = [table[(key, m, run)]["bf16"]["median_us"] for run in runs]
            times = [
                r["median_us"] / b if r else float("nan") for r, b in zip(rows, bf16, strict=True)
            ]
            clocks = [(r.get("sm_clock_mhz") or float("nan")) if r else float("nan") for r in rows]
            if path != "marlin":
                time_axis.bar(offsets, times, width=width, color=colors[path], label=path)
            clock_axis.bar(offsets, clocks, width=width, color=colors[path], label=path)
        time_axis.set_ylim(0.8, 1.2)
        time_axis.axhline(1.0, color="black", linewidth=0.8)
        time_axis.set_ylabel("time / BF16 (same run)")
        clock_axis.set_ylabel("SM clock after the replay (MHz)")
        clock_axis.set_ylim(1000, 2100)
        for axis in (time_axis, clock_axis):
            axis.set_xticks(range(len(runs)), runs, fontsize=8)
            axis.set_title(f"{key} M={m}", fontsize=9)
            axis.grid(True, axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=7, ncols=2)
    axes[0][1].legend(fontsize=7, ncols=3)
    fig.suptitle(
        f"{result['machine']['gpu']}: large M by replay order (medians of CUDA-graph replays)",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = result_cli.parser("bench_order.py", __doc__)
    parser.add_argument("--calibration", type=Path, help="calibration table for the dual path")
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, help="comma-separated shape names")
    parser.add_argument("--m", default=",".join(map(str, DEFAULT_M)), help="comma-separated M")
    parser.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S)
    args = result_cli.parse(parser, argv)
    return args


def _nvml_reading() -> tuple[float | None, float | None]:
    """SM clock (MHz) and board power (W) now, or None where NVML cannot say."""
    import torch

    try:
        clock = float(torch.cuda.clock_rate())
    except Exception:  # no pynvml, or NVML unavailable: the clock is a note, not a result
        clock = None
    try:
        power = float(torch.cuda.power_draw()) / 1e3
    except Exception:  # likewise
        power = None
    return clock, power


def _record_reading(
    readings: dict[str, list[tuple[float | None, float | None]]], name: str
) -> None:
    readings[name].append(_nvml_reading())


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from bench import select_shapes
    from bench_paths import graph_kernel_names, machine, make_weight_sets, path_factories
    from vllm_dualpath import calls, scratch, timing
    from vllm_dualpath.calibrate import (
        configure_overlay,
        log,
        require_gpu_and_marlin,
        weight_set_count,
    )

    require_gpu_and_marlin(args.marlin_lib, "the order benchmark")
    current = configure_overlay(args.calibration)
    factories = path_factories(current.channel_scale)
    factories["unpack_again"] = factories["unpack_cublas"]
    generator = torch.Generator(device="cuda")
    generator.manual_seed(0)
    device = torch.device("cuda", torch.cuda.current_device())
    result: dict[str, Any] = {
        "command": " ".join(sys.argv),
        "machine": machine(),
        "budget_s": args.budget_s,
        "rows": [],
        "probes": {},
    }
    for shape in select_shapes(args.shapes):
        weights = make_weight_sets(
            shape.n, shape.k, weight_set_count(shape.n, shape.k), (128, 128), generator
        )
        log(f"{shape.name} {shape.key}: {len(weights)} weight sets")
        for m in (int(v) for v in args.m.split(",")):
            x = torch.randn(m, shape.k, device="cuda", generator=generator).to(torch.bfloat16)
            before = calls.snapshot()
            scratch_before = scratch.capacity(device)
            kernels = {
                p: graph_kernel_names(factories[p](weights[0], x))
                for p in ("unpack_cublas", "dualpath")
            }
            after = calls.snapshot()
            result["probes"][f"{shape.key} M={m}"] = {
                "kernels": kernels,
                # One eager warm-up call and one captured call of the op.
                "calls_during_capture": {p: after[p] - before[p] for p in after},
                "scratch_before": scratch_before,
                "scratch_after": scratch.capacity(device),
            }
            for run, (paths, order, clocked) in RUNS.items():
                readings: dict[str, list[tuple[float | None, float | None]]] = {
                    p: [] for p in paths
                }
                found = timing.median_call_us_side_by_side(
                    {p: [factories[p](w, x) for w in weights] for p in paths},
                    args.budget_s,
                    order=order,
                    seed=m,
                    after_replay=functools.partial(_record_reading, readings) if clocked else None,
                )
                for path, us in found.items():
                    clocks = [c for c, _ in readings[path] if c is not None]
                    powers = [w for _, w in readings[path] if w is not None]
                    result["rows"].append(
                        {
                            "n": shape.n,
                            "k": shape.k,
                            "m": m,
                            "run": run,
                            "path": path,
                            "median_us": us,
                            "sm_clock_mhz": statistics.median(clocks) if clocks else None,
                            "power_w": statistics.median(powers) if powers else None,
                            "replays": len(readings[path]) or None,
                        }
                    )
                r = ratios(rows_by_run(result)[(shape.key, m, run)])
                log(
                    f"    M={m} {run:13s} dual/unpack {r['dual_over_unpack']:.3f} "
                    f"unpack/bf16 {r['unpack_over_bf16']:.3f} dual/bf16 {r['dual_over_bf16']:.3f}"
                )
            del x
            torch.cuda.empty_cache()
            args.out.write_text(json.dumps(result, indent=1) + "\n")
        del weights
        torch.cuda.empty_cache()
    return result


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    result = result_cli.result(args, measure)
    print(markdown(result))
    if args.png:
        plot(result, args.png)
    if args.markdown:
        args.markdown.write_text(markdown(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
