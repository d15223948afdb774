"""The report's tables: one row per reference case, measured beside the reference figure (and
beside a model's forecast where one is given), and one per case of another name (prefill and
decode as measured, no reference). Every row also gives the median time to first token and both
rates, whatever the case's phase."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .forecast import Forecast
from .reference import CASES, Case, Phase
from .serve_result import ServeResult

FORECAST_HEADER = "predicted (GB10 model)"


@dataclass(frozen=True)
class Row:
    case: Case
    measured: float | None
    requests: int
    note: str
    ttft_ms: float | None = None
    prefill: float | None = None
    decode: float | None = None
    predicted: float | None = None

    @property
    def ratio(self) -> float | None:
        """Measured over the reference (its middle where the reference is a range)."""
        return None if self.measured is None else self.measured / self.case.reference_mid


def build_rows(results: Mapping[str, ServeResult], forecast: Forecast | None = None) -> list[Row]:
    """One row per known case, in the reference's order; a case not run stays as 'not run'."""
    rows = []
    for case in CASES:
        predicted = forecast.for_case(case.name) if forecast else None
        result = results.get(case.name)
        if result is None:
            rows.append(Row(case, None, 0, "not run", predicted=predicted))
            continue
        prefill, decode = result.median_prefill_tok_s, result.median_decode_tok_s
        rows.append(
            Row(
                case,
                prefill if case.phase is Phase.PREFILL else decode,
                len(result.input_lens),
                _note(case, result),
                ttft_ms=result.median_ttft_ms,
                prefill=prefill,
                decode=decode,
                predicted=predicted,
            )
        )
    return rows


def _parts(result: ServeResult, prompts: bool, outputs: bool) -> list[str]:
    """How many requests, their prompt and output lengths, how many failed."""
    parts = [f"median of {len(result.input_lens)}"]
    if prompts:
        parts.append(f"{result.mean_input_len:,.0f}-token prompts")
    if outputs and result.output_lens:
        parts.append(f"{sum(result.output_lens) / len(result.output_lens):,.0f} tokens out")
    if result.failed:
        parts.append(f"{result.failed} failed")
    return parts


def _note(case: Case, result: ServeResult) -> str:
    prefill = case.phase is Phase.PREFILL
    parts = _parts(result, prompts=prefill, outputs=not prefill)
    served_before = result.extra.get("served_before")
    if case.name == "prefill_12k_cold" and served_before not in (None, "", "0", 0):
        parts.append(f"not cold: the service had served {served_before} requests before")
    return "; ".join(parts)


@dataclass(frozen=True)
class OtherRow:
    """A case outside the reference's: both rates, since its phase is not known."""

    name: str
    prefill: float | None
    decode: float | None
    requests: int
    note: str
    ttft_ms: float | None = None


def build_other_rows(results: Mapping[str, ServeResult]) -> list[OtherRow]:
    """One row per result whose case is not a reference case, by name."""
    known = {case.name for case in CASES}
    rows = []
    for name in sorted(set(results) - known):
        result = results[name]
        rows.append(
            OtherRow(
                name,
                result.median_prefill_tok_s,
                result.median_decode_tok_s,
                len(result.input_lens),
                "; ".join(_parts(result, prompts=True, outputs=True)),
                ttft_ms=result.median_ttft_ms,
            )
        )
    return rows


def render_other_markdown(rows: Iterable[OtherRow]) -> str:
    return _table(
        ["case", "prefill tok/s", "decode tok/s", "TTFT ms (median)", "notes"],
        [
            [row.name, _cell(row.prefill), _cell(row.decode), _cell(row.ttft_ms), row.note]
            for row in rows
        ],
    )


def render_markdown(rows: Iterable[Row]) -> str:
    return _table(
        [
            "case",
            "tok/s measured",
            FORECAST_HEADER,
            "tok/s reference",
            "measured / reference",
            "TTFT ms (median)",
            "prefill tok/s",
            "decode tok/s",
            "notes",
        ],
        [
            [
                row.case.title,
                _cell(row.measured),
                _cell(row.predicted),
                row.case.reference_text,
                "—" if row.ratio is None else f"{row.ratio:.2f}x",
                _cell(row.ttft_ms),
                _cell(row.prefill),
                _cell(row.decode),
                row.note,
            ]
            for row in rows
        ],
    )


def _table(header: list[str], rows: Iterable[list[str]]) -> str:
    """Markdown: text columns first and last, figures right-aligned between them."""
    align = ["---", *["---:"] * (len(header) - 2), "---"]
    lines = [f"| {' | '.join(header)} |", f"|{'|'.join(align)}|"]
    lines += [f"| {' | '.join(cells)} |" for cells in rows]
    return "\n".join(lines) + "\n"


def _cell(value: float | None) -> str:
    return "—" if value is None else _number(value)


def _number(value: float) -> str:
    return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"
