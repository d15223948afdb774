"""The report directory: Markdown with the tables, the PNG beside it, and a JSON summary."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from .forecast import Forecast
from .load_to_ready import LoadToReady, duration_text
from .plots import plot_rows
from .reference import REFERENCE_PRECISION_TABLE, REFERENCE_SOURCE
from .serve_result import ResultFileError, ServeResult, load_serve_result
from .table import (
    FORECAST_HEADER,
    OtherRow,
    Row,
    build_other_rows,
    build_rows,
    render_markdown,
    render_other_markdown,
)

FIGURE_NAME = "throughput.png"
MARKDOWN_NAME = "report.md"
SUMMARY_NAME = "summary.json"


class NoResultsError(ValueError):
    """The results directory holds no result."""


@dataclass(frozen=True)
class Report:
    markdown: Path
    figure: Path
    summary: Path
    rows: tuple[Row, ...]
    other_rows: tuple[OtherRow, ...]
    load: LoadToReady


def load_results(results_dir: Path) -> dict[str, ServeResult]:
    """Every *.json under results_dir, keyed by case; a later file of the same case wins."""
    results: dict[str, ServeResult] = {}
    for path in sorted(results_dir.glob("*.json")):
        result = load_serve_result(path)
        results[result.case] = result
    return results


def write_report(
    results: Mapping[str, ServeResult],
    out_dir: Path,
    title: str,
    context: Mapping[str, str],
    forecast: Forecast | None = None,
    load: LoadToReady | None = None,
    forecast_note: str = "",
) -> Report:
    """forecast: the model's predictions, if any (forecast_note says why there are none);
    load: the service's load-to-ready, if known."""
    if not results:
        raise NoResultsError("no result: nothing to report")
    load = load or LoadToReady(None, None, "not recorded")
    rows = build_rows(results, forecast)
    other_rows = build_other_rows(results)
    out_dir.mkdir(parents=True, exist_ok=True)
    figure = plot_rows(rows, out_dir / FIGURE_NAME, title)
    markdown = out_dir / MARKDOWN_NAME
    predicted = _forecast_source(forecast, forecast_note)
    markdown.write_text(
        _markdown(rows, other_rows, title, context, results, load, predicted), encoding="utf-8"
    )
    summary = out_dir / SUMMARY_NAME
    summary.write_text(
        json.dumps(_summary(rows, other_rows, context, forecast, load), indent=2) + "\n",
        encoding="utf-8",
    )
    return Report(markdown, figure, summary, tuple(rows), tuple(other_rows), load)


def _markdown(
    rows: Sequence[Row],
    other_rows: Sequence[OtherRow],
    title: str,
    context: Mapping[str, str],
    results: Mapping[str, ServeResult],
    load: LoadToReady,
    predicted: str,
) -> str:
    models = sorted({result.model_id for result in results.values() if result.model_id})
    lines = [f"# {title}", ""]
    lines += [f"- {key}: {value}" for key, value in context.items()]
    if models:
        lines.append(f"- model: {', '.join(models)}")
    lines += [
        "- measured with `vllm bench serve` inside the runtime image, one request at a time;",
        "  prefill = prompt tokens / time to first token, decode = tokens after the first /",
        "  time after the first token, each the median over the case's requests; TTFT is",
        "  vLLM's median time to first token of the case.",
        f"- reference figures: {REFERENCE_SOURCE}.",
        f"- {FORECAST_HEADER}: {predicted}.",
        "",
        "## The service",
        "",
        "Load to ready: from the start of the pair's rank containers (the earlier of the two) to",
        "the moment rank 0 first answered `/v1/models`, as its readiness gate recorded them.",
        "",
        _render_load(load),
        "## The cases",
        "",
        render_markdown(rows),
        f"![measured beside the reference]({FIGURE_NAME})",
        "",
    ]
    if other_rows:
        lines += [
            "## Other cases",
            "",
            "Cases without a reference figure, both rates as measured (the median per request).",
            "",
            render_other_markdown(other_rows),
        ]
    lines += [
        "## Reference: precision of the dense layers",
        "",
        "| precision of dense layers | prefill 12k tok/s | decode prose tok/s |",
        "|---|---|---|",
        *[
            f"| {name} | {prefill} | {decode} |"
            for name, prefill, decode in REFERENCE_PRECISION_TABLE
        ],
        "",
    ]
    return "\n".join(lines)


def _render_load(load: LoadToReady) -> str:
    seconds = load.seconds
    cells = [
        "—" if seconds is None else duration_text(seconds),
        _utc(load.started),
        _utc(load.ready),
        load.note,
    ]
    return "\n".join(
        [
            "| load to ready | rank containers started | first answered readiness | notes |",
            "|---:|---|---|---|",
            f"| {' | '.join(cells)} |",
            "",
        ]
    )


def _utc(stamp: datetime | None) -> str:
    return "—" if stamp is None else stamp.strftime("%Y-%m-%d %H:%M:%S UTC")


def _iso(stamp: datetime | None) -> str | None:
    return None if stamp is None else stamp.isoformat().replace("+00:00", "Z")


def _forecast_source(forecast: Forecast | None, note: str) -> str:
    if forecast is None:
        return f"{note or 'no forecast file'}; the column says —"
    return f"the {forecast.gpu} forecast in {forecast.source} (— for a case it does not list)"


def _summary(
    rows: Sequence[Row],
    other_rows: Sequence[OtherRow],
    context: Mapping[str, str],
    forecast: Forecast | None,
    load: LoadToReady,
) -> dict[str, object]:
    return {
        "context": dict(context),
        "load_to_ready": {
            "seconds": load.seconds,
            "started": _iso(load.started),
            "ready": _iso(load.ready),
            "note": load.note,
        },
        "forecast": None if forecast is None else {"gpu": forecast.gpu, "source": forecast.source},
        "cases": [
            {
                "case": row.case.name,
                "phase": row.case.phase.value,
                "measured_tok_s": row.measured,
                "predicted_tok_s": row.predicted,
                "reference_tok_s": [row.case.reference_low, row.case.reference_high],
                "ratio": row.ratio,
                "median_ttft_ms": row.ttft_ms,
                "prefill_tok_s": row.prefill,
                "decode_tok_s": row.decode,
                "requests": row.requests,
                "note": row.note,
            }
            for row in rows
        ],
        "other_cases": [
            {
                "case": row.name,
                "prefill_tok_s": row.prefill,
                "decode_tok_s": row.decode,
                "median_ttft_ms": row.ttft_ms,
                "requests": row.requests,
                "note": row.note,
            }
            for row in other_rows
        ],
    }


__all__ = ["NoResultsError", "Report", "ResultFileError", "load_results", "write_report"]
