"""Decode at Marlin's speed: the op's small-M path against vLLM's Marlin call, in CUDA graphs.

    PYTHONPATH=src:benchmarks python benchmarks/bench_decode.py --out decode.json
    PYTHONPATH=src:benchmarks python benchmarks/bench_decode.py --report decode.json \\
        --png decode.png --markdown decode.md

Per shape and M <= 20, side by side (``vllm_dualpath.timing``): BF16 cuBLAS, Marlin, unpack +
cuBLAS and the op (dual path) replayed as bench.py replays them, in that order every round
('fixed', for the shapes --fixed-shapes names), and the same with a second Marlin column, in a
fresh order every round ('shuffled'): Marlin against itself is the measurement's own spread.
Also, per shape, the kernels one graph replay of Marlin and of the op runs, and whether the two
give the same bits. Progress goes to stderr; the JSON is rewritten after each shape.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import result_cli

# bench.py's paths in bench.py's order, and the shuffled set with Marlin twice.
FIXED_PATHS = ("bf16", "marlin", "unpack_cublas", "dualpath")
SHUFFLED_PATHS = (*FIXED_PATHS, "marlin_again")
DEFAULT_M = (1, 2, 4, 8, 16, 20)
# The shapes where dual / Marlin reached 1.03 in dualpath-h200.json.
DEFAULT_FIXED_SHAPES = ("qkv_proj", "odd_n_4100")
DEFAULT_BUDGET_S = 0.12
TARGET = 1.01  # dual / Marlin at every M <= 20

Cell = tuple[int, int, int, str]  # n, k, m, order


def medians(result: dict[str, Any]) -> dict[Cell, dict[str, float]]:
    """Median us per path, by (n, k, m, order)."""
    table: dict[Cell, dict[str, float]] = defaultdict(dict)
    for row in result["rows"]:
        table[(row["n"], row["k"], row["m"], row["order"])][row["path"]] = row["median_us"]
    return dict(table)


def ratios(result: dict[str, Any]) -> dict[Cell, dict[str, float]]:
    """dual / Marlin per cell, and Marlin's second column / Marlin where it was measured."""
    found = {}
    for cell, paths in medians(result).items():
        entry = {"dual_over_marlin": paths["dualpath"] / paths["marlin"]}
        if "marlin_again" in paths:
            entry["marlin_again_over_marlin"] = paths["marlin_again"] / paths["marlin"]
        found[cell] = entry
    return found


def worst(result: dict[str, Any], order: str, ratio: str = "dual_over_marlin") -> tuple[float, str]:
    """The largest ratio measured in that order, and where."""
    cells = [(v[ratio], c) for c, v in ratios(result).items() if c[3] == order and ratio in v]
    if not cells:
        return float("nan"), ""
    value, (n, k, m, _) = max(cells)
    return value, f"{n}x{k} M={m}"


def spread(result: dict[str, Any], order: str = "shuffled") -> float:
    """The largest distance of Marlin against itself from 1: what one ratio can be off by."""
    values = [
        abs(v["marlin_again_over_marlin"] - 1)
        for c, v in ratios(result).items()
        if c[3] == order and "marlin_again_over_marlin" in v
    ]
    return max(values) if values else float("nan")


def summary(result: dict[str, Any]) -> list[str]:
    """One line per order: the worst and the median dual / Marlin, and Marlin's own spread."""
    lines = []
    for order in ("fixed", "shuffled"):
        value, where = worst(result, order)
        if not where:
            continue
        values = [v["dual_over_marlin"] for c, v in ratios(result).items() if c[3] == order]
        line = f"{order}: worst dual/Marlin {value:.3f} at {where}, median "
        line += f"{statistics.median(values):.3f}"
        aa = spread(result, order)
        if aa == aa:  # not NaN: Marlin was timed twice in this order
            line += f"; Marlin/Marlin off by at most {aa:.3f}"
        lines.append(line)
    return lines


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"GPU: {result['machine']['gpu']} ({result['machine']['nvidia_smi']})",
        "",
        "| order | worst dual / Marlin | where | Marlin / Marlin, worst distance from 1 | "
        f"dual / Marlin <= {TARGET} |",
        "|---|---|---|---|---|",
    ]
    for order in ("fixed", "shuffled"):
        value, where = worst(result, order)
        if not where:
            continue
        aa = spread(result, order)
        aa_text = "-" if aa != aa else f"{aa:.3f}"  # NaN: not measured in this order
        lines.append(
            f"| {order} | {value:.3f} | {where} | {aa_text} | "
            f"{'yes' if value <= TARGET else '**no**'} |"
        )
    table = ratios(result)
    times = medians(result)
    shapes = sorted({(n, k) for n, k, _, _ in table}, key=lambda s: -s[0] * s[1])
    lines += [
        "",
        "| N x K | M | Marlin us | dual us | dual / Marlin, fixed | dual / Marlin, shuffled | "
        "Marlin / Marlin, shuffled |",
        "|---|---|---|---|---|---|---|",
    ]
    for n, k in shapes:
        for m in sorted({c[2] for c in table if c[:2] == (n, k)}):
            fixed = table.get((n, k, m, "fixed"), {}).get("dual_over_marlin")
            shuffled = table.get((n, k, m, "shuffled"), {})
            paths = times.get((n, k, m, "shuffled"), {})
            lines.append(
                f"| {n}x{k} | {m} | {paths.get('marlin', float('nan')):.2f} | "
                f"{paths.get('dualpath', float('nan')):.2f} | "
                f"{'-' if fixed is None else f'{fixed:.3f}'} | "
                f"{shuffled.get('dual_over_marlin', float('nan')):.3f} | "
                f"{shuffled.get('marlin_again_over_marlin', float('nan')):.3f} |"
            )
    same = [key for key, v in result["kernels"].items() if v["marlin"] == v["dualpath"]]
    equal = [key for key, v in result["kernels"].items() if v["bit_equal"]]
    lines += [
        "",
        f"Kernels in one graph replay the same for Marlin and the op: {len(same)} of "
        f"{len(result['kernels'])} shapes; outputs bit-equal: {len(equal)} of "
        f"{len(result['kernels'])}.",
    ]
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = ratios(result)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    shapes = sorted({(n, k) for n, k, _, _ in table}, key=lambda s: -s[0] * s[1])
    colors = plt.get_cmap("tab10")
    for axis, order in zip(axes, ("fixed", "shuffled"), strict=True):
        for index, (n, k) in enumerate(shapes):
            ms = sorted(c[2] for c in table if c[:2] == (n, k) and c[3] == order)
            if not ms:
                continue
            axis.plot(
                ms,
                [table[(n, k, m, order)]["dual_over_marlin"] for m in ms],
                marker="o",
                markersize=3,
                color=colors(index),
                label=f"{n}x{k} dual / Marlin",
            )
            if order == "shuffled":
                axis.plot(
                    ms,
                    [table[(n, k, m, order)]["marlin_again_over_marlin"] for m in ms],
                    linestyle=":",
                    color=colors(index),
                    linewidth=1,
                )
        axis.axhline(TARGET, color="red", linewidth=0.8, linestyle="--")
        axis.axhline(1.0, color="black", linewidth=0.8)
        axis.set_xscale("log", base=2)
        axis.set_xlabel("M (tokens)")
        axis.set_title(
            "bench.py's order every round (fixed)"
            if order == "fixed"
            else "fresh order every round (shuffled); dotted: Marlin / Marlin",
            fontsize=9,
        )
        axis.grid(True, alpha=0.3)
    axes[0].set_ylabel("time / Marlin's time")
    axes[1].legend(fontsize=7)
    fig.suptitle(
        f"{result['machine']['gpu']}: the op's decode path against Marlin, CUDA graphs, medians",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = result_cli.parser("bench_decode.py", __doc__)
    parser.add_argument("--shapes", help="comma-separated shape names (default: all)")
    parser.add_argument(
        "--fixed-shapes",
        default=",".join(DEFAULT_FIXED_SHAPES),
        help="shapes also timed in bench.py's fixed order ('' for none)",
    )
    parser.add_argument("--m", default=",".join(map(str, DEFAULT_M)), help="comma-separated M")
    parser.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S)
    args = result_cli.parse(parser, argv)
    return args


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from bench import select_shapes
    from bench_paths import graph_kernel_names, machine, make_weight_sets, path_factories
    from vllm_dualpath import timing
    from vllm_dualpath.calibrate import (
        configure_overlay,
        log,
        require_gpu_and_marlin,
        weight_set_count,
    )

    require_gpu_and_marlin(args.marlin_lib, "the decode benchmark")
    current = configure_overlay(None)
    shapes = select_shapes(args.shapes)
    fixed = {s.name for s in select_shapes(args.fixed_shapes)} if args.fixed_shapes else set()
    m_values = [int(m) for m in args.m.split(",")]
    factories = path_factories(current.channel_scale)
    factories["marlin_again"] = factories["marlin"]
    generator = torch.Generator(device="cuda")
    generator.manual_seed(0)
    result: dict[str, Any] = {
        "command": " ".join(sys.argv),
        "machine": machine(),
        "budget_s": args.budget_s,
        "rows": [],
        "kernels": {},
    }
    for index, shape in enumerate(shapes, 1):
        weights = make_weight_sets(
            shape.n, shape.k, weight_set_count(shape.n, shape.k), (128, 128), generator
        )
        log(f"[{index}/{len(shapes)}] {shape.name} {shape.key}: {len(weights)} weight sets")
        x = torch.randn(1, shape.k, device="cuda", generator=generator).to(torch.bfloat16)
        kernels = {
            p: graph_kernel_names(factories[p](weights[0], x)) for p in ("marlin", "dualpath")
        }
        equal = all(
            torch.equal(
                factories["marlin"](weights[0], xm)(), factories["dualpath"](weights[0], xm)()
            )
            for xm in (
                x,
                torch.randn(20, shape.k, device="cuda", generator=generator).to(torch.bfloat16),
            )
        )
        result["kernels"][shape.key] = {**kernels, "bit_equal": equal}
        same = kernels["marlin"] == kernels["dualpath"]
        log(f"    kernels per replay: {len(kernels['marlin'])}, same: {same}; bit-equal: {equal}")
        for m in m_values:
            x = torch.randn(m, shape.k, device="cuda", generator=generator).to(torch.bfloat16)
            orders = [("fixed", FIXED_PATHS)] if shape.name in fixed else []
            for order, paths in [*orders, ("shuffled", SHUFFLED_PATHS)]:
                found = timing.median_call_us_side_by_side(
                    {p: [factories[p](w, x) for w in weights] for p in paths},
                    args.budget_s,
                    order=order,
                    seed=m,
                )
                result["rows"] += [
                    {"n": shape.n, "k": shape.k, "m": m, "order": order, "path": p, "median_us": t}
                    for p, t in found.items()
                ]
                line = f"dual/marlin {found['dualpath'] / found['marlin']:.3f}"
                if "marlin_again" in found:
                    line += f"  marlin/marlin {found['marlin_again'] / found['marlin']:.3f}"
                log(f"    M={m:<3d} {order:8s} marlin {found['marlin']:7.2f} us  {line}")
        del weights
        torch.cuda.empty_cache()
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    result = result_cli.result(args, measure)
    for line in summary(result):
        print(line)
    if args.png:
        plot(result, args.png)
    if args.markdown:
        args.markdown.write_text(markdown(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
