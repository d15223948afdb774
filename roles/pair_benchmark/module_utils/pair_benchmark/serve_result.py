"""One `vllm bench serve --save-result` JSON file, reduced to the figures the report quotes.

Prefill speed of a request is its prompt length over its time to first token; decode speed is the
tokens after the first over the time after the first (what TPOT inverts). Both are taken per request
and summarised by the median, so one slow outlier does not move the figure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any


class ResultFileError(ValueError):
    """The file is not a usable `vllm bench serve` result."""


@dataclass(frozen=True)
class ServeResult:
    case: str
    model_id: str
    date: str
    completed: int
    failed: int
    max_concurrency: int | None
    input_lens: tuple[int, ...]
    output_lens: tuple[int, ...]
    ttfts_s: tuple[float, ...]
    decode_seconds: tuple[float, ...]
    median_ttft_ms: float
    median_tpot_ms: float
    extra: dict[str, Any]

    @property
    def prefill_tok_s(self) -> tuple[float, ...]:
        return tuple(n / t for n, t in zip(self.input_lens, self.ttfts_s, strict=True) if t > 0)

    @property
    def decode_tok_s(self) -> tuple[float, ...]:
        pairs = zip(self.output_lens, self.decode_seconds, strict=True)
        return tuple((n - 1) / s for n, s in pairs if n > 1 and s > 0)

    @property
    def median_prefill_tok_s(self) -> float | None:
        return median(self.prefill_tok_s) if self.prefill_tok_s else None

    @property
    def median_decode_tok_s(self) -> float | None:
        if self.decode_tok_s:
            return median(self.decode_tok_s)
        return 1000.0 / self.median_tpot_ms if self.median_tpot_ms > 0 else None

    @property
    def mean_input_len(self) -> float:
        return sum(self.input_lens) / len(self.input_lens) if self.input_lens else 0.0


REQUIRED = ("completed", "median_ttft_ms", "total_input_tokens", "total_output_tokens")
PER_REQUEST = ("input_lens", "output_lens", "ttfts")


def parse_serve_result(data: dict[str, Any], fallback_case: str) -> ServeResult:
    """Build a ServeResult; the case comes from `--metadata case=<name>`, else the file's stem."""
    missing = [key for key in REQUIRED if key not in data]
    if missing:
        raise ResultFileError(f"not a vllm bench serve result: missing {', '.join(missing)}")
    if not all(key in data for key in PER_REQUEST):
        data = _per_request_from_summary(data)
    # Failed requests have an empty TTFT and no tokens; keep the successful ones only.
    rows = [
        (int(n_in), int(n_out), float(ttft), _decode_seconds(itl))
        for n_in, n_out, ttft, itl in zip(
            data["input_lens"],
            data["output_lens"],
            data["ttfts"],
            data.get("itls") or [[] for _ in data["input_lens"]],
            strict=True,
        )
        if ttft and float(ttft) > 0 and int(n_out) > 0
    ]
    if not rows:
        raise ResultFileError("the result holds no successful request")
    known = {*REQUIRED, *PER_REQUEST, "itls", "generated_texts", "errors", "case"}
    return ServeResult(
        case=str(data.get("case") or fallback_case),
        model_id=str(data.get("model_id", "")),
        date=str(data.get("date", "")),
        completed=int(data["completed"]),
        failed=int(data.get("failed", 0)),
        max_concurrency=data.get("max_concurrency"),
        input_lens=tuple(row[0] for row in rows),
        output_lens=tuple(row[1] for row in rows),
        ttfts_s=tuple(row[2] for row in rows),
        decode_seconds=tuple(row[3] for row in rows),
        median_ttft_ms=float(data["median_ttft_ms"]),
        median_tpot_ms=float(data.get("median_tpot_ms") or 0.0),
        extra={k: v for k, v in data.items() if k not in known and not isinstance(v, list)},
    )


def load_serve_result(path: Path) -> ServeResult:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ResultFileError(f"{path}: not JSON ({error})") from error
    if not isinstance(data, dict):
        raise ResultFileError(f"{path}: not a JSON object")
    try:
        return parse_serve_result(data, fallback_case=path.stem)
    except ResultFileError as error:
        raise ResultFileError(f"{path}: {error}") from error


def _decode_seconds(itl: list[float] | None) -> float:
    # Inter-token latencies are per streamed chunk (several tokens under speculative decoding):
    # their sum is the request's time after the first token.
    return float(sum(itl or []))


def _per_request_from_summary(data: dict[str, Any]) -> dict[str, Any]:
    """Without --save-detailed, vLLM keeps only summaries: stand for each request by the median."""
    completed = int(data["completed"])
    if completed < 1:
        raise ResultFileError("the result holds no successful request")
    ttft_s = float(data["median_ttft_ms"]) / 1000
    output_len = round(int(data["total_output_tokens"]) / completed)
    tpot_s = float(data.get("median_tpot_ms") or 0.0) / 1000
    return {
        **data,
        "input_lens": [round(int(data["total_input_tokens"]) / completed)] * completed,
        "output_lens": [output_len] * completed,
        "ttfts": [ttft_s] * completed,
        "itls": [[tpot_s * max(output_len - 1, 0)]] * completed,
    }
