"""A model's forecast per reference case (the GB10 model's file, written by its owner into the
role's files/): read when there, absent is no forecast, and a file off its schema is refused.
The sample forecasts are written here, in each test's own directory, never into the role."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pair_benchmark.forecast import ForecastFileError, load_forecast, parse_forecast

SAMPLE = {
    "gpu": "GB10",
    "model": "a roofline of the GB10, for the tests",
    "cases": {"prefill_12k_warm": {"tok_s": 1288.0}, "decode_code": {"tok_s": 41}},
}


def write(directory: Path, data: Any) -> Path:
    path = directory / "gb10_forecast.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_the_forecast_gives_each_case_it_lists(tmp_path: Path) -> None:
    forecast = load_forecast(write(tmp_path, SAMPLE))
    assert forecast is not None
    assert forecast.gpu == "GB10"
    assert forecast.source == str(tmp_path / "gb10_forecast.json")
    assert forecast.for_case("prefill_12k_warm") == 1288.0
    assert forecast.for_case("decode_code") == 41.0
    assert forecast.for_case("decode_korean_prose") is None


def test_no_file_is_no_forecast(tmp_path: Path) -> None:
    assert load_forecast(tmp_path / "gb10_forecast.json") is None
    assert load_forecast(None) is None


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ([], "not a JSON object"),
        ({"cases": {}}, "'gpu' is not a name"),
        ({"gpu": "GB10", "cases": []}, "'cases' is not an object of cases"),
        (
            {"gpu": "GB10", "cases": {"decode_code": 41.0}},
            "case decode_code: 'tok_s' is not a number",
        ),
        ({"gpu": "GB10", "cases": {"decode_code": {"tok_s": "41"}}}, "'tok_s' is not a number"),
        ({"gpu": "GB10", "cases": {"decode_code": {"tok_s": True}}}, "'tok_s' is not a number"),
        ({"gpu": "GB10", "cases": {"decode_code": {"tok_s": 0}}}, "'tok_s' is 0, not above 0"),
        ({"gpu": "GB10", "cases": {"decode_code": {"tok_s": float("nan")}}}, "not above 0"),
    ],
)
def test_a_forecast_off_its_schema_is_refused(data: Any, says: str) -> None:
    with pytest.raises(ForecastFileError, match=says):
        parse_forecast(data, "gb10_forecast.json")


def test_a_file_that_is_not_json_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "gb10_forecast.json"
    path.write_text("{", encoding="utf-8")
    with pytest.raises(ForecastFileError, match="not JSON"):
        load_forecast(path)
