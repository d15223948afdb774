"""Targets, a table and a plot from a model-level benchmark (python -m vllm_dualpath.bench_model).

    python -m vllm_dualpath.model_report model.json --png model.png --markdown model.md

Needs matplotlib for the plot only; runs anywhere (no GPU).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vllm_dualpath import settings

# What a prefill pass through the dense layers may cost against BF16 weights.
# (where, lowest M, highest M or None for open-ended, largest dual path / bf16).
TARGETS = (("M = 1024", 1024, 1024, 1.10), ("M >= 2048", 2048, None, 1.03))
PATHS = ("bf16", "marlin", "unpack_cublas", "unpack_ahead")


def default_path(m: int) -> str:
    """The overlay path the op takes at M with its default settings (above the thresholds)."""
    if m >= settings.DEFAULT_UNPACK_AHEAD_MIN_M:
        return "unpack_ahead"
    return "unpack_cublas"


def by_m(result: dict[str, Any]) -> dict[int, dict[str, dict[str, float]]]:
    table: dict[int, dict[str, dict[str, float]]] = defaultdict(dict)
    for row in result["rows"]:
        table[row["m"]][row["path"]] = row
    return dict(sorted(table.items()))


def target_lines(result: dict[str, Any]) -> list[tuple[str, float, float, bool]]:
    """(range, worst dual path / bf16 in it, limit, met) for each target range measured; the
    dual path at each M is the one the op takes by default (``default_path``)."""
    table = by_m(result)
    lines = []
    for where, low, high, limit in TARGETS:
        ms = [m for m in table if m >= low and (high is None or m <= high)]
        if not ms:
            continue
        worst = max(
            table[m][default_path(m)]["median_us"] / table[m]["bf16"]["median_us"] for m in ms
        )
        lines.append((where, worst, limit, worst <= limit))
    return lines


TIMING_NOTES = {
    "isolated": "each pass timed alone, from an idle GPU",
    "queued": "passes timed back to back behind queued work, the GPU never pausing",
}


def _clock_table(result: dict[str, Any]) -> list[str]:
    """Median SM clock (MHz) while each path's passes ran; nothing if it was not measured."""
    table = by_m(result)
    if not any(row.get("sm_clock_mhz") for paths in table.values() for row in paths.values()):
        return []
    lines = [
        "",
        "SM clock while the passes ran (MHz, median; NVML):",
        "",
        "| M | bf16 | marlin | unpack + cuBLAS | unpack ahead |",
        "|---|---|---|---|---|",
    ]
    for m, paths in table.items():
        clocks = [paths[p].get("sm_clock_mhz") for p in PATHS]
        lines.append(f"| {m} | " + " | ".join(f"{c:.0f}" if c else "-" for c in clocks) + " |")
    return lines


def markdown(result: dict[str, Any]) -> str:
    timing = result.get("timing", "isolated")
    lines = [
        f"Timing: `{timing}` ({TIMING_NOTES.get(timing, 'unknown')}).",
        "",
        "| target: dual path (defaults) / bf16 | worst | limit | met |",
        "|---|---|---|---|",
    ]
    for where, worst, limit, met in target_lines(result):
        lines.append(f"| {where} | {worst:.3f} | {limit:.2f} | {'yes' if met else '**no**'} |")
    lines += [
        "",
        "Median time of a pass on the GPU's clock (us), time / BF16; host: median time the host",
        "took to issue the pass (us). Where host time reaches pass time, the host sets the pace.",
        "",
        "| M | bf16 | marlin | unpack + cuBLAS | unpack ahead | default | "
        "host bf16 | host in-line | host ahead |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m, paths in by_m(result).items():
        bf16 = paths["bf16"]["median_us"]
        cells = [f"{paths[p]['median_us'] / bf16:.3f}x" for p in PATHS[1:]]
        hosts = [f"{paths[p]['host_us']:.0f}" for p in ("bf16", "unpack_cublas", "unpack_ahead")]
        lines.append(
            f"| {m} | {bf16:.0f} | "
            + " | ".join(cells)
            + f" | {default_path(m)} | "
            + " | ".join(hosts)
            + " |"
        )
    scratch = result["scratch_bytes"]
    lines += [
        "",
        f"Scratch: {scratch['plain']:,} bytes for the plain buffer, {scratch['ahead']:,} more "
        "for the unpack-ahead double buffer.",
    ]
    lines += _clock_table(result)
    calls = result.get("host_call_us")
    if calls:
        lines += [
            "",
            f"Host time to issue one call alone ({calls['shape']}, M = {calls['m']}): "
            f"{calls['unpack_launch']:.1f} us for the unpack's launch as the op repeats it "
            f"({calls['unpack_launch_dispatched']:.1f} us through Triton's dispatch), "
            f"{calls['linear']:.1f} us for `F.linear`.",
        ]
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = by_m(result)
    ms = list(table)
    fig, (ratio_axis, host_axis) = plt.subplots(1, 2, figsize=(11, 4))
    styles = {
        "marlin": ("Marlin FP8", "tab:orange"),
        "unpack_cublas": ("unpack + cuBLAS, in line", "tab:green"),
        "unpack_ahead": ("unpack ahead (side stream)", "tab:blue"),
    }
    for path, (label, color) in styles.items():
        ratios = [table[m][path]["median_us"] / table[m]["bf16"]["median_us"] for m in ms]
        ratio_axis.plot(ms, ratios, label=label, color=color, marker="o", markersize=3)
        host_axis.plot(
            ms,
            [table[m][path]["host_us"] / table[m][path]["median_us"] for m in ms],
            label=label,
            color=color,
            marker="o",
            markersize=3,
        )
    for _, low, high, limit in TARGETS:
        end = ms[-1] if high is None else high * 1.4
        ratio_axis.hlines(limit, low / 1.4, end, colors="gray", linestyles=":", linewidth=1)
    ratio_axis.axhline(1.0, color="black", linewidth=0.8)
    host_axis.axhline(1.0, color="black", linewidth=0.8)
    for axis in (ratio_axis, host_axis):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("M (tokens in the pass)")
        axis.grid(True, which="both", alpha=0.3)
    ratio_axis.set_ylabel("pass time / BF16 cuBLAS")
    ratio_axis.set_title("time of a pass (dotted: targets)", fontsize=10)
    host_axis.set_ylabel("host issue time / pass time")
    host_axis.set_title("near 1: the host, not the GPU, sets the pace", fontsize=10)
    ratio_axis.legend(fontsize=8)
    fig.suptitle(
        f"{result['gpu']}: {len(result['layers'])} dense layers of a TP2 rank in forward order "
        f"({result.get('timing', 'isolated')} passes)",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vllm_dualpath.model_report", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("result", type=Path, help="JSON written by vllm_dualpath.bench_model")
    parser.add_argument("--png", type=Path, help="plot to write")
    parser.add_argument("--markdown", type=Path, help="targets and table to write")
    args = parser.parse_args(argv)
    result = json.loads(args.result.read_text(encoding="utf-8"))
    for where, worst, limit, met in target_lines(result):
        state = "met" if met else "MISSED"
        print(f"{state:6s} dual path / bf16 at {where}: {worst:.3f} (at most {limit})")
    if args.png:
        plot(result, args.png)
    if args.markdown:
        args.markdown.write_text(markdown(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
