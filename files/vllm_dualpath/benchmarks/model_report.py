"""Targets, a table and a plot from a model-level benchmark (bench_model.py).

    PYTHONPATH=src python benchmarks/model_report.py model.json --png model.png --markdown model.md
    PYTHONPATH=src python benchmarks/model_report.py step-a.json step-b.json --png steps.png \\
        --markdown steps.md

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


def path_of_depth(depth: int) -> str:
    """The benchmark's name for unpacking ``depth`` layers ahead."""
    return "unpack_ahead" if depth == 1 else f"unpack_ahead_depth{depth}"


# Paths only some results measured: two layers ahead, and one ahead with each prefetch started
# as soon as its slot is free rather than after the GEMM before it.
DEPTH2 = path_of_depth(2)
SLOT_FREE = "unpack_ahead_slot_free"
OPTIONAL_PATHS = (DEPTH2, SLOT_FREE)
HEADINGS = {
    "bf16": "bf16",
    "marlin": "marlin",
    "unpack_cublas": "unpack + cuBLAS",
    "unpack_ahead": "unpack ahead",
    DEPTH2: "two ahead",
    SLOT_FREE: "ahead, from slot free",
}
COLORS = {
    "marlin": "tab:orange",
    "unpack_cublas": "tab:green",
    "unpack_ahead": "tab:blue",
    DEPTH2: "tab:red",
    SLOT_FREE: "tab:purple",
}


def paths_of(result: dict[str, Any]) -> tuple[str, ...]:
    """The paths a result measured: every one of ``PATHS``, then those of ``OPTIONAL_PATHS``
    it has."""
    measured = {row["path"] for row in result["rows"]}
    return (*PATHS, *(p for p in OPTIONAL_PATHS if p in measured))


def step_of(result: dict[str, Any]) -> str:
    """The step a result measured; a result without the field ran the dense one."""
    return str(result.get("step", "dense"))


def default_depth(result: dict[str, Any]) -> int:
    """The op's default unpack-ahead depth when the result was measured (1 where the result
    has no such field)."""
    return int(result.get("default_ahead_depth", 1))


def ahead_path(result: dict[str, Any]) -> str:
    """The ahead path the op took with its default depth when the result was measured."""
    return path_of_depth(default_depth(result))


def default_path(m: int, result: dict[str, Any]) -> str:
    """The overlay path the op takes at M with its default settings (above the thresholds)."""
    if m >= settings.DEFAULT_UNPACK_AHEAD_MIN_M:
        return ahead_path(result)
    return "unpack_cublas"


def by_m(result: dict[str, Any]) -> dict[int, dict[str, dict[str, float]]]:
    table: dict[int, dict[str, dict[str, float]]] = defaultdict(dict)
    for row in result["rows"]:
        table[row["m"]][row["path"]] = row
    return dict(sorted(table.items()))


def target_lines(result: dict[str, Any]) -> list[tuple[str, float, float, bool]]:
    """(range, worst dual path / bf16 in it, limit, met) for each target range measured; the
    dual path at each M is the one the op takes by default (``default_path``). The targets are
    set on the dense step; a decoder step's passes hold other work too, so it has none."""
    if step_of(result) != "dense":
        return []
    table = by_m(result)
    lines = []
    for where, low, high, limit in TARGETS:
        ms = [m for m in table if m >= low and (high is None or m <= high)]
        if not ms:
            continue
        worst = max(
            table[m][default_path(m, result)]["median_us"] / table[m]["bf16"]["median_us"]
            for m in ms
        )
        lines.append((where, worst, limit, worst <= limit))
    return lines


def ahead_hides(paths: dict[str, dict[str, float]], ahead: str = "unpack_ahead") -> float | None:
    """The share of the in-line path's time over BF16 that unpacking ahead (the ``ahead``
    path) removes (1: all of it, 0: none, below 0: ahead is slower), or None where the in-line
    path costs no more."""
    bf16 = paths["bf16"]["median_us"]
    extra = paths["unpack_cublas"]["median_us"] - bf16
    if extra <= 0:
        return None
    return 1 - (paths[ahead]["median_us"] - bf16) / extra


def scratch_line(result: dict[str, Any]) -> str:
    scratch = result["scratch_bytes"]
    plain = f"Scratch: {scratch['plain']:,} bytes for the plain buffer"
    slot = scratch.get("ahead_slot")
    if slot is None:  # a result without per-slot sizes had two slots
        return f"{plain}, {scratch['ahead']:,} more for the unpack-ahead double buffer."
    depth = default_depth(result)
    return (
        f"{plain}, {slot:,} more for each unpack-ahead buffer (depth + 1 of them: "
        f"{(depth + 1) * slot:,} bytes at the default depth, {depth})."
    )


def step_line(result: dict[str, Any]) -> str:
    if step_of(result) == "dense":
        return "Step: `dense` (the dense layers alone, back to back)."
    link = result.get("link_gbs")
    wait = (
        "no all-reduce stand-in"
        if link is None
        else f"an all-reduce stand-in after o_proj and after the shared expert at {link:g} GB/s"
    )
    return (
        "Step: `decoder` (attention after qkv, the SiLU-and-mul before the shared expert's "
        f"down, {wait}). The targets are set on the dense step."
    )


TIMING_NOTES = {
    "isolated": "each pass timed alone, from an idle GPU",
    "queued": "passes timed back to back behind queued work, the GPU never pausing",
}


def _clock_table(result: dict[str, Any]) -> list[str]:
    """Median SM clock (MHz) while each path's passes ran; nothing if it was not measured."""
    table = by_m(result)
    if not any(row.get("sm_clock_mhz") for paths in table.values() for row in paths.values()):
        return []
    measured = paths_of(result)
    lines = [
        "",
        "SM clock while the passes ran (MHz, median; NVML):",
        "",
        "| M | " + " | ".join(HEADINGS[p] for p in measured) + " |",
        "|---|" + "---|" * len(measured),
    ]
    for m, paths in table.items():
        clocks = [paths[p].get("sm_clock_mhz") for p in measured]
        lines.append(f"| {m} | " + " | ".join(f"{c:.0f}" if c else "-" for c in clocks) + " |")
    return lines


def markdown(result: dict[str, Any]) -> str:
    timing = result.get("timing", "isolated")
    lines = [
        f"Timing: `{timing}` ({TIMING_NOTES.get(timing, 'unknown')}).",
        step_line(result),
    ]
    targets = target_lines(result)
    if targets:
        lines += [
            "",
            "| target: dual path (defaults) / bf16 | worst | limit | met |",
            "|---|---|---|---|",
        ]
    for where, worst, limit, met in targets:
        lines.append(f"| {where} | {worst:.3f} | {limit:.2f} | {'yes' if met else '**no**'} |")
    measured = paths_of(result)
    lines += [
        "",
        "Median time of a pass on the GPU's clock (us), time / BF16; hidden: the share of the",
        "in-line path's time over BF16 that unpacking ahead (at the default depth) removes;",
        "host: median time the host took to issue the pass (us). Where host time reaches pass",
        "time, the host sets the pace.",
        "",
        "| M | "
        + " | ".join(HEADINGS[p] for p in measured)
        + " | hidden | default | host bf16 | host in-line | host ahead |",
        "|---|" + "---|" * (len(measured) + 5),
    ]
    ahead = ahead_path(result)
    for m, paths in by_m(result).items():
        bf16 = paths["bf16"]["median_us"]
        cells = [f"{paths[p]['median_us'] / bf16:.3f}x" for p in measured[1:]]
        hidden = ahead_hides(paths, ahead)
        cells.append("-" if hidden is None else f"{hidden:.0%}")
        hosts = [f"{paths[p]['host_us']:.0f}" for p in ("bf16", "unpack_cublas", ahead)]
        lines.append(
            f"| {m} | {bf16:.0f} | "
            + " | ".join(cells)
            + f" | {default_path(m, result)} | "
            + " | ".join(hosts)
            + " |"
        )
    lines += ["", scratch_line(result)]
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


def _m_axes(ratio_axis: Any, other_axis: Any, other_baseline: float) -> None:
    """Both panels over M on a log scale; the left one is time / BF16, with BF16's line at 1."""
    ratio_axis.axhline(1.0, color="black", linewidth=0.8)
    other_axis.axhline(other_baseline, color="black", linewidth=0.8)
    for axis in (ratio_axis, other_axis):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("M (tokens in the pass)")
        axis.grid(True, which="both", alpha=0.3)
    ratio_axis.set_ylabel("pass time / BF16 cuBLAS")


def draw_targets(axis: Any, ms: Sequence[int]) -> None:
    """The targets' limits as dotted lines over the M they apply to."""
    for _, low, high, limit in TARGETS:
        end = ms[-1] if high is None else high * 1.4
        axis.hlines(limit, low / 1.4, end, colors="gray", linestyles=":", linewidth=1)


def _save(fig: Any, heading: str, png: Path, fontsize: int) -> None:
    fig.suptitle(heading, fontsize=fontsize)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def plot(result: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = by_m(result)
    ms = list(table)
    fig, (ratio_axis, host_axis) = plt.subplots(1, 2, figsize=(11, 4))
    labels = {
        "marlin": "Marlin FP8",
        "unpack_cublas": "unpack + cuBLAS, in line",
        "unpack_ahead": "unpack ahead (side stream)",
        DEPTH2: "unpack two ahead",
        SLOT_FREE: "unpack ahead, from slot free",
    }
    measured = paths_of(result)
    for path, label in labels.items():
        if path not in measured:
            continue
        color = COLORS[path]
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
    dense = step_of(result) == "dense"
    if dense:
        draw_targets(ratio_axis, ms)
    _m_axes(ratio_axis, host_axis, 1.0)
    ratio_axis.set_title("time of a pass" + (" (dotted: targets)" if dense else ""), fontsize=10)
    host_axis.set_ylabel("host issue time / pass time")
    host_axis.set_title("near 1: the host, not the GPU, sets the pace", fontsize=10)
    ratio_axis.legend(fontsize=8)
    around = ""
    if not dense:
        link = result.get("link_gbs")
        around = " with decoder work" + ("" if link is None else f", link {link:g} GB/s")
    heading = (
        f"{result['gpu']}: {len(result['layers'])} dense layers of a TP2 rank in forward order"
        f"{around} ({result.get('timing', 'isolated')} passes)"
    )
    _save(fig, heading, png, 11)


def title(result: dict[str, Any]) -> str:
    """A short name for one result among several: its step, link and timing."""
    name = f"{step_of(result)} step"
    if result.get("link_gbs") is not None:
        name += f", link {result['link_gbs']:g} GB/s"
    return f"{name}, {result.get('timing', 'isolated')} passes"


def plot_sweep(results: Sequence[dict[str, Any]], png: Path) -> None:
    """Several results side by side: each one's in-line and ahead paths against BF16, and the
    share of the in-line path's extra time that unpacking ahead hides."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ratio_axis, hidden_axis) = plt.subplots(1, 2, figsize=(11, 4))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, result in enumerate(results):
        table = by_m(result)
        ms = list(table)
        color = colors[index % len(colors)]
        lines = {"unpack_cublas": (":", "in line"), "unpack_ahead": ("-", "ahead")}
        if DEPTH2 in paths_of(result):
            lines[DEPTH2] = ("--", "two ahead")
        if SLOT_FREE in paths_of(result):
            lines[SLOT_FREE] = ("-.", "ahead from slot free")
        for path, (style, name) in lines.items():
            ratios = [table[m][path]["median_us"] / table[m]["bf16"]["median_us"] for m in ms]
            label = f"{title(result)}: {name}"
            ratio_axis.plot(ms, ratios, style, color=color, marker="o", markersize=3, label=label)
        hidden = [ahead_hides(table[m], ahead_path(result)) for m in ms]
        shown = [(m, h) for m, h in zip(ms, hidden, strict=True) if h is not None]
        hidden_axis.plot(
            [m for m, _ in shown],
            [100 * h for _, h in shown],
            color=color,
            marker="o",
            markersize=3,
            label=title(result),
        )
    _m_axes(ratio_axis, hidden_axis, 0.0)
    ratio_axis.set_title(
        "dotted: in line; solid: ahead; dashed: two ahead; dash-dot: ahead from slot free",
        fontsize=8,
    )
    hidden_axis.set_ylabel("% of the in-line path's extra time hidden")
    hidden_axis.set_title("what unpacking ahead hides", fontsize=10)
    ratio_axis.legend(fontsize=6)
    hidden_axis.legend(fontsize=7)
    _save(fig, f"{results[0]['gpu']}: dual path against BF16 per pass", png, 11)


PANEL_PATHS = ("unpack_cublas", "unpack_ahead", DEPTH2, SLOT_FREE)
PANEL_RATIOS = (0.85, 1.5)  # the y range: where the overlay paths differ from BF16


def plot_panels(results: Sequence[dict[str, Any]], png: Path) -> None:
    """One panel per result, each with every overlay path it measured against BF16: the
    unpack-ahead variants side by side, step by step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(3, len(results))
    rows = -(-len(results) // columns)
    fig, axes = plt.subplots(
        rows, columns, figsize=(4.2 * columns, 3.4 * rows), squeeze=False, sharey=True
    )
    for axis, result in zip(axes.flat, results, strict=False):
        table = by_m(result)
        ms = list(table)
        for path in PANEL_PATHS:
            if path not in paths_of(result):
                continue
            ratios = [table[m][path]["median_us"] / table[m]["bf16"]["median_us"] for m in ms]
            style = {"color": COLORS[path], "marker": "o", "markersize": 3}
            axis.plot(ms, ratios, label=HEADINGS[path], **style)
        if step_of(result) == "dense":
            draw_targets(axis, ms)
        axis.axhline(1.0, color="black", linewidth=0.8)
        axis.set_xscale("log", base=2)
        axis.set_ylim(*PANEL_RATIOS)
        axis.grid(True, which="both", alpha=0.3)
        axis.set_title(title(result), fontsize=9)
        axis.set_xlabel("M (tokens in the pass)", fontsize=8)
    for axis in axes.flat[len(results) :]:
        axis.set_visible(False)
    for axis in axes[:, 0]:
        axis.set_ylabel("pass time / BF16 cuBLAS")
    axes.flat[0].legend(fontsize=7)
    heading = (
        f"{results[0]['gpu']}: unpack-ahead variants per step (dotted: targets; "
        f"values above {PANEL_RATIOS[1]} are off the top)"
    )
    _save(fig, heading, png, 10)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="model_report.py", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "results",
        type=Path,
        nargs="+",
        help="JSON written by bench_model.py; several are reported one after another",
    )
    parser.add_argument("--png", type=Path, help="plot to write")
    parser.add_argument("--markdown", type=Path, help="targets and table to write")
    parser.add_argument(
        "--panels",
        action="store_true",
        help="plot one panel per result with every overlay path, instead of one shared plot",
    )
    args = parser.parse_args(argv)
    results = [json.loads(path.read_text(encoding="utf-8")) for path in args.results]
    for result in results:
        for where, worst, limit, met in target_lines(result):
            state = "met" if met else "MISSED"
            print(f"{state:6s} dual path / bf16 at {where}: {worst:.3f} (at most {limit})")
    if args.png:
        if args.panels:
            plot_panels(results, args.png)
        elif len(results) == 1:
            plot(results[0], args.png)
        else:
            plot_sweep(results, args.png)
    if args.markdown:
        if len(results) == 1:
            text = markdown(results[0])
        else:
            text = "\n".join(f"### {title(r)}\n\n{markdown(r)}" for r in results)
        args.markdown.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
