"""A performance model's forecast for the reference cases (the GB10 model's file, when present).

The file is {"gpu": "GB10", "cases": {"<case>": {"tok_s": <float>}, ...}, ...}: predicted tokens
per second per case, in the phase the case measures (prefill or decode). Cases it does not list,
and names that are not reference cases, are left without a prediction.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class ForecastFileError(ValueError):
    """The forecast file is there but does not follow its schema."""


@dataclass(frozen=True)
class Forecast:
    gpu: str
    source: str
    tok_s: Mapping[str, float] = field(default_factory=dict)

    def for_case(self, name: str) -> float | None:
        return self.tok_s.get(name)


def parse_forecast(data: Any, source: str) -> Forecast:
    if not isinstance(data, dict):
        raise ForecastFileError(f"{source}: not a JSON object")
    gpu, cases = data.get("gpu"), data.get("cases")
    if not isinstance(gpu, str) or not gpu:
        raise ForecastFileError(f"{source}: 'gpu' is not a name")
    if not isinstance(cases, dict):
        raise ForecastFileError(f"{source}: 'cases' is not an object of cases")
    tok_s = {}
    for name, case in cases.items():
        value = case.get("tok_s") if isinstance(case, dict) else None
        # bool is an int to Python, and a forecast of true tokens per second is a slip.
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ForecastFileError(f"{source}: case {name}: 'tok_s' is not a number")
        if not math.isfinite(value) or value <= 0:
            raise ForecastFileError(f"{source}: case {name}: 'tok_s' is {value}, not above 0")
        tok_s[str(name)] = float(value)
    return Forecast(gpu=gpu, source=source, tok_s=tok_s)


def load_forecast(path: Path | None) -> Forecast | None:
    """The forecast in path; None where there is no such file (no column to fill)."""
    if path is None or not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ForecastFileError(f"{path}: not JSON ({error})") from error
    return parse_forecast(data, str(path))
