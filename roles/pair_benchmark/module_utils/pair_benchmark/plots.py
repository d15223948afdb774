"""Side-by-side bars of measured and reference figures: prefill and decode in one PNG."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .reference import Phase
from .table import Row

MEASURED_COLOUR = "#1f6fb4"
REFERENCE_COLOUR = "#b0b0b0"


def plot_rows(rows: Sequence[Row], path: Path, title: str) -> Path:
    """Write the figure and return its path; cases not run show their reference bar only."""
    # A bare Figure renders with Agg and never needs a display (pyplot would pick a backend).
    figure = Figure(figsize=(12, 4.8))
    axes = figure.subplots(1, 2)
    for axis, phase in zip(axes, (Phase.PREFILL, Phase.DECODE), strict=True):
        _panel(axis, [row for row in rows if row.case.phase is phase], phase)
    figure.suptitle(title)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    return path


def _panel(axis: Axes, rows: Sequence[Row], phase: Phase) -> None:
    positions = list(range(len(rows)))
    width = 0.38
    # A reference given as a range is drawn at its middle with the range as an error bar.
    spans = [
        [row.case.reference_mid - row.case.reference_low for row in rows],
        [row.case.reference_high - row.case.reference_mid for row in rows],
    ]
    axis.bar(
        [p - width / 2 for p in positions],
        [row.case.reference_mid for row in rows],
        width,
        yerr=spans,
        capsize=4,
        color=REFERENCE_COLOUR,
        label="reference deployment",
    )
    bars = axis.bar(
        [p + width / 2 for p in positions],
        [row.measured or 0.0 for row in rows],
        width,
        color=MEASURED_COLOUR,
        label="this pair",
    )
    for bar, row in zip(bars, rows, strict=True):
        axis.annotate(
            _label(row.measured),
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    axis.set_xticks(positions, [row.case.title for row in rows], rotation=15, ha="right")
    axis.tick_params(axis="x", labelsize=8)
    axis.set_ylabel("tokens per second")
    axis.set_title(f"{phase.value} (single stream)")
    axis.legend(fontsize=8)


def _label(measured: float | None) -> str:
    if measured is None:
        return "not run"
    return f"{measured:,.0f}" if measured >= 100 else f"{measured:.1f}"
