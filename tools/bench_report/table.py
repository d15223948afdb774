"""The report's tables: one row per reference case, measured beside the reference figure, and
one per case of another name (prefill and decode as measured, no reference)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tools.bench_report.reference import CASES, Case, Phase
from tools.bench_report.serve_result import ServeResult


@dataclass(frozen=True)
class Row:
    case: Case
    measured: float | None
    requests: int
    note: str

    @property
    def ratio(self) -> float | None:
        """Measured over the reference (its middle where the reference is a range)."""
        return None if self.measured is None else self.measured / self.case.reference_mid


def build_rows(results: Mapping[str, ServeResult]) -> list[Row]:
    """One row per known case, in the reference's order; a case not run stays as 'not run'."""
    rows = []
    for case in CASES:
        result = results.get(case.name)
        if result is None:
            rows.append(Row(case, None, 0, "not run"))
            continue
        measured = (
            result.median_prefill_tok_s
            if case.phase is Phase.PREFILL
            else result.median_decode_tok_s
        )
        rows.append(Row(case, measured, len(result.input_lens), _note(case, result)))
    return rows


def _note(case: Case, result: ServeResult) -> str:
    parts = [f"median of {len(result.input_lens)}"]
    if case.phase is Phase.PREFILL:
        parts.append(f"{result.mean_input_len:,.0f}-token prompts")
    else:
        parts.append(f"{sum(result.output_lens) / len(result.output_lens):,.0f} tokens out")
    if result.failed:
        parts.append(f"{result.failed} failed")
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


def build_other_rows(results: Mapping[str, ServeResult]) -> list[OtherRow]:
    """One row per result whose case is not a reference case, by name."""
    known = {case.name for case in CASES}
    rows = []
    for name in sorted(set(results) - known):
        result = results[name]
        parts = [
            f"median of {len(result.input_lens)}",
            f"{result.mean_input_len:,.0f}-token prompts",
        ]
        if result.output_lens:
            parts.append(f"{sum(result.output_lens) / len(result.output_lens):,.0f} tokens out")
        if result.failed:
            parts.append(f"{result.failed} failed")
        rows.append(
            OtherRow(
                name,
                result.median_prefill_tok_s,
                result.median_decode_tok_s,
                len(result.input_lens),
                "; ".join(parts),
            )
        )
    return rows


def render_other_markdown(rows: Iterable[OtherRow]) -> str:
    lines = [
        "| case | prefill tok/s | decode tok/s | notes |",
        "|---|---:|---:|---|",
    ]
    for row in rows:
        prefill = "—" if row.prefill is None else _number(row.prefill)
        decode = "—" if row.decode is None else _number(row.decode)
        lines.append(f"| {row.name} | {prefill} | {decode} | {row.note} |")
    return "\n".join(lines) + "\n"


def render_markdown(rows: Iterable[Row]) -> str:
    lines = [
        "| case | tok/s measured | tok/s reference | measured / reference | notes |",
        "|---|---:|---:|---:|---|",
    ]
    for row in rows:
        measured = "—" if row.measured is None else _number(row.measured)
        ratio = "—" if row.ratio is None else f"{row.ratio:.2f}x"
        lines.append(
            f"| {row.case.title} | {measured} | {row.case.reference_text} | {ratio} | {row.note} |"
        )
    return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"
