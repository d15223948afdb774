"""A table and a plot from the calibrated-op GPU test's results (tests/gpu/test_calibrated_op.py).

    python benchmarks/calibration_report.py calibrated-op-*.json --png calibrated-op.png \\
        --markdown calibrated-op.md

Per shape: the M ranges the calibration gave unpack + cuBLAS, how many M of the fine grid were
timed, and the worst ratio of the calibrated op to the faster path. Needs matplotlib for the plot
only; runs anywhere (no GPU).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

TOLERANCE = 1.03


def ranges_text(ranges: Sequence[Sequence[int | None]]) -> str:
    if not ranges:
        return "none (Marlin at every M)"
    return ", ".join(
        f"{low}-{high}" if high is not None else f"{low} and up" for low, high in ranges
    )


def summary(result: dict[str, Any]) -> dict[str, Any]:
    rows = result["rows"]
    worst = max(rows, key=lambda row: row["ratio"])
    return {
        "shape": f"{result['shape']['name']} {result['shape']['n']}x{result['shape']['k']}",
        "unpack": ranges_text(result["unpack_ranges"]),
        "points": len(rows),
        "over": sum(row["ratio"] > TOLERANCE for row in rows),
        "worst_m": worst["m"],
        "worst_ratio": worst["ratio"],
    }


def markdown(results: Sequence[dict[str, Any]]) -> str:
    lines = [
        f"GPU: {results[0]['gpu']}",
        "",
        "| shape | unpack + cuBLAS at M | M timed | over 1.03x | worst: M, op / faster path |",
        "|---|---|---|---|---|",
    ]
    for result in results:
        s = summary(result)
        lines.append(
            f"| {s['shape']} | {s['unpack']} | {s['points']} | {s['over']} "
            f"| {s['worst_m']}, {s['worst_ratio']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def plot(results: Sequence[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, len(results), figsize=(6 * len(results), 7), squeeze=False)
    for column, result in enumerate(results):
        rows = result["rows"]
        m = [row["m"] for row in rows]
        top, bottom = axes[0][column], axes[1][column]
        for name, label in (("marlin", "Marlin"), ("unpack_cublas", "unpack + cuBLAS")):
            top.plot(m, [row[name] for row in rows], label=label, linewidth=1)
        top.plot(m, [row["dualpath"] for row in rows], label="calibrated op", linestyle="--")
        top.set_xscale("log", base=2)
        top.set_yscale("log")
        top.set_ylabel("us per call (median, CUDA graphs)")
        top.set_title(summary(result)["shape"])
        top.legend()
        bottom.plot(m, [row["ratio"] for row in rows], marker=".", linewidth=0.5)
        bottom.axhline(TOLERANCE, color="red", linewidth=0.8, label=f"{TOLERANCE}x")
        bottom.set_xscale("log", base=2)
        bottom.set_xlabel("M (tokens in the call)")
        bottom.set_ylabel("calibrated op / faster path")
        bottom.legend()
    figure.suptitle(f"Calibrated dual-path op against both paths, {results[0]['gpu']}")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", type=Path)
    parser.add_argument("--png", type=Path)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)
    results = [json.loads(path.read_text(encoding="utf-8")) for path in args.results]
    text = markdown(results)
    print(text, end="")
    if args.markdown:
        args.markdown.write_text(text, encoding="utf-8")
    if args.png:
        plot(results, args.png)
    return 0 if all(summary(r)["over"] == 0 for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
