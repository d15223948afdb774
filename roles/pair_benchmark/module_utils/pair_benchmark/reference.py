"""The reference deployment's figures (2x DGX Spark, TP2 over RoCE v2, FP8 + dual-path)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Phase(StrEnum):
    PREFILL = "prefill"
    DECODE = "decode"


@dataclass(frozen=True)
class Case:
    """A benchmark case: what it measures and what the reference deployment measured for it."""

    name: str
    title: str
    phase: Phase
    reference_low: float
    reference_high: float

    @property
    def reference_text(self) -> str:
        if self.reference_low == self.reference_high:
            return (
                f"{self.reference_low:,.1f}"
                if self.reference_low < 100
                else f"{self.reference_low:,.0f}"
            )
        return f"{self.reference_low:,.1f}-{self.reference_high:,.1f}"

    @property
    def reference_mid(self) -> float:
        return (self.reference_low + self.reference_high) / 2


CASES: tuple[Case, ...] = (
    Case("prefill_12k_warm", "prefill 12k context, warm", Phase.PREFILL, 1341.0, 1341.0),
    Case("prefill_24k_warm", "prefill 24k context, warm", Phase.PREFILL, 1311.0, 1311.0),
    Case("prefill_12k_cold", "first request after start (cold), 12k", Phase.PREFILL, 851.0, 851.0),
    Case("decode_code", "decode, code", Phase.DECODE, 43.2, 43.2),
    Case("decode_korean_prose", "decode, Korean prose", Phase.DECODE, 36.5, 36.5),
    Case("decode_english_prose", "decode, English prose", Phase.DECODE, 32.8, 36.1),
)
CASES_BY_NAME = {case.name: case for case in CASES}

# The reference's precision table (prefill 12k tok/s, decode prose tok/s), quoted in every report.
REFERENCE_PRECISION_TABLE: tuple[tuple[str, str, str], ...] = (
    ("all BF16", "1,395", "25.6"),
    ("dense FP8 (Marlin W8A16) only", "1,225 (-12%)", "36.2 (+40%)"),
    ("FP8 + dual-path", "1,341", "36.5"),
)
REFERENCE_SOURCE = "2x DGX Spark, 200GbE ConnectX-7, RoCE v2, NCCL over IB verbs"
