"""Targets, ratios and a plot from a benchmark JSON (bench.py).

    PYTHONPATH=src python benchmarks/bench_report.py dualpath.json --png dualpath.png \\
        --markdown targets.md

Needs matplotlib for the plot only; runs anywhere (no GPU).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The targets of the dual path, side by side in one run on one GPU.
UNPACK_OF_COPY_MIN = 0.90
DUAL_OVER_MARLIN_MAX_SMALL_M = 1.02
SMALL_M_MAX = 20
DUAL_OVER_BF16_MAX_LARGE_M = 1.05
LARGE_M_MIN = 4096
DUAL_OVER_BEST_MAX = 1.03

Timings = dict[tuple[int, int], dict[int, dict[str, float]]]


@dataclass(frozen=True)
class Check:
    target: str
    worst: float
    limit: float
    where: str
    at_most: bool = True

    @property
    def met(self) -> bool:
        return self.worst <= self.limit if self.at_most else self.worst >= self.limit


def timings(result: dict[str, Any]) -> Timings:
    table: Timings = defaultdict(lambda: defaultdict(dict))
    for row in result["rows"]:
        table[(row["n"], row["k"])][row["m"]][row["path"]] = row["median_us"]
    return table


def _worst(
    table: Timings, ratio: str, select: Any, higher_is_worse: bool = True
) -> tuple[float, str]:
    worst, where = (float("-inf"), "") if higher_is_worse else (float("inf"), "")
    for (n, k), by_m in table.items():
        for m, paths in by_m.items():
            if not select(m) or "dualpath" not in paths:
                continue
            value = _ratio(paths, ratio)
            if (value > worst) if higher_is_worse else (value < worst):
                worst, where = value, f"{n}x{k} M={m}"
    return worst, where


def _ratio(paths: dict[str, float], ratio: str) -> float:
    if ratio == "best":
        return paths["dualpath"] / min(paths["marlin"], paths["unpack_cublas"])
    return paths["dualpath"] / paths[ratio]


def checks(result: dict[str, Any]) -> list[Check]:
    table = timings(result)
    copy = result["copy_gbps"]
    unpack = result["unpack_gbps"]
    slowest = min(unpack, key=unpack.get) if unpack else ""
    found = [
        Check(
            f"unpack >= {UNPACK_OF_COPY_MIN:.0%} of device copy ({copy:.0f} GB/s)",
            unpack[slowest] / copy if unpack else float("nan"),
            UNPACK_OF_COPY_MIN,
            slowest,
            at_most=False,
        )
    ]
    worst, where = _worst(table, "marlin", lambda m: m <= SMALL_M_MAX)
    found.append(
        Check(
            f"dual path <= {DUAL_OVER_MARLIN_MAX_SMALL_M}x Marlin at M <= {SMALL_M_MAX}",
            worst,
            DUAL_OVER_MARLIN_MAX_SMALL_M,
            where,
        )
    )
    worst, where = _worst(table, "bf16", lambda m: m >= LARGE_M_MIN)
    found.append(
        Check(
            f"dual path <= {DUAL_OVER_BF16_MAX_LARGE_M}x BF16 at M >= {LARGE_M_MIN}",
            worst,
            DUAL_OVER_BF16_MAX_LARGE_M,
            where,
        )
    )
    worst, where = _worst(table, "best", lambda m: True)
    found.append(
        Check(
            f"dual path within {DUAL_OVER_BEST_MAX - 1:.0%} of min(Marlin, unpack + cuBLAS)",
            worst,
            DUAL_OVER_BEST_MAX,
            where,
        )
    )
    return found


def markdown(result: dict[str, Any]) -> str:
    """Targets, then per shape the ratios at every M."""
    lines = ["| target | worst measured | limit | where | met |", "|---|---|---|---|---|"]
    for check in checks(result):
        lines.append(
            f"| {check.target} | {check.worst:.3f} | {check.limit:.2f} | {check.where} | "
            f"{'yes' if check.met else '**no**'} |"
        )
    lines += [
        "",
        f"Unpack bandwidth (GB/s, 3 bytes per element; device copy "
        f"{result['copy_gbps']:.0f} GB/s):",
        "",
    ]
    lines += ["| N x K | GB/s | of copy |", "|---|---|---|"]
    for key, gbps in result["unpack_gbps"].items():
        lines.append(f"| {key} | {gbps:.0f} | {gbps / result['copy_gbps']:.0%} |")
    for (n, k), by_m in timings(result).items():
        lines += [
            "",
            f"**{n} x {k}** (median us; ratios)",
            "",
            "| M | bf16 | marlin | unpack+cuBLAS | dual | marlin/bf16 | unpack/bf16 | "
            "dual/bf16 | dual/marlin | dual/best |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for m in sorted(by_m):
            p = by_m[m]
            lines.append(
                f"| {m} | {p['bf16']:.1f} | {p['marlin']:.1f} | {p['unpack_cublas']:.1f} | "
                f"{p['dualpath']:.1f} | {p['marlin'] / p['bf16']:.2f} | "
                f"{p['unpack_cublas'] / p['bf16']:.2f} | {p['dualpath'] / p['bf16']:.2f} | "
                f"{p['dualpath'] / p['marlin']:.2f} | {_ratio(p, 'best'):.2f} |"
            )
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], png: Path, names: dict[str, str] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    table = timings(result)
    columns = 4
    rows = (len(table) + columns - 1) // columns
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.4 * rows), squeeze=False)
    styles = {
        "marlin": ("Marlin FP8", "tab:orange"),
        "unpack_cublas": ("unpack + cuBLAS", "tab:green"),
        "dualpath": ("dual path (calibrated)", "tab:blue"),
    }
    for axis, ((n, k), by_m) in zip(axes.flat, table.items(), strict=False):
        ms = sorted(by_m)
        for path, (label, color) in styles.items():
            axis.plot(
                ms,
                [by_m[m][path] / by_m[m]["bf16"] for m in ms],
                label=label,
                color=color,
                linewidth=2.4 if path == "dualpath" else 1.3,
                linestyle="-" if path == "dualpath" else "--",
                marker="o" if path == "dualpath" else None,
                markersize=3,
            )
        axis.axhline(1.0, color="black", linewidth=0.8)
        axis.set_xscale("log", base=2)
        axis.set_yscale("log", base=2)
        axis.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%.3g"))
        axis.set_title(f"{(names or {}).get(f'{n}x{k}', '')} N={n} K={k}", fontsize=9)
        axis.set_xlabel("M (tokens)", fontsize=8)
        axis.set_ylabel("time / BF16 cuBLAS", fontsize=8)
        axis.tick_params(labelsize=7)
        axis.grid(True, which="both", alpha=0.3)
    for axis in list(axes.flat)[len(table) :]:
        axis.set_visible(False)
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(
        f"{result['gpu']}: FP8 weight-only dense layers, time relative to BF16 cuBLAS "
        "(lower is faster)",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_report.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("result", type=Path, help="JSON written by bench.py")
    parser.add_argument("--png", type=Path, help="plot to write")
    parser.add_argument("--markdown", type=Path, help="targets and ratio tables to write")
    args = parser.parse_args(argv)
    result = json.loads(args.result.read_text(encoding="utf-8"))
    for check in checks(result):
        state = "met" if check.met else "MISSED"
        print(f"{state:6s} {check.target}: worst {check.worst:.3f} at {check.where}")
    if args.png:
        from vllm_dualpath.calibrate import SHAPES

        plot(result, args.png, {s.key: s.name for s in SHAPES})
    if args.markdown:
        args.markdown.write_text(markdown(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
