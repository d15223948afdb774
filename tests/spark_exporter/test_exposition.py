"""The text format itself: what Prometheus' parser reads back, and what the writer refuses."""

from __future__ import annotations

import math

import pytest
from spark_exporter.exposition import Metrics, escape_label_value, format_value

from tests.spark_exporter.conftest import parse


def test_help_type_and_samples_read_back_exactly() -> None:
    metrics = Metrics()
    metrics.gauge("spark_a", "A gauge with a back\\slash and\na new line.").add(1.5, twin="x")
    metrics.counter("spark_b_total", "A counter.").add(2**40)
    metrics.gauge("spark_empty", "No samples: left out.")
    text = metrics.render()

    assert text.splitlines()[:2] == [
        "# HELP spark_a A gauge with a back\\\\slash and\\na new line.",
        "# TYPE spark_a gauge",
    ]
    assert "spark_empty" not in text
    seen = parse(text)
    assert seen.value("spark_a", twin="x") == 1.5
    assert seen.value("spark_b_total") == 2**40
    assert seen.types == {"spark_a": "gauge", "spark_b_total": "counter"}


def test_label_values_escape_backslash_quote_and_new_line() -> None:
    odd = 'a\\b"c\nd'
    assert escape_label_value(odd) == 'a\\\\b\\"c\\nd'
    metrics = Metrics()
    metrics.gauge("spark_x", "x").add(1, release=odd)
    assert parse(metrics.render()).value("spark_x", release=odd) == 1


def test_values_are_written_as_prometheus_reads_them() -> None:
    assert format_value(9000.0) == "9000"
    assert format_value(86.43) == "86.43"
    assert format_value(math.nan) == "NaN"
    assert format_value(math.inf) == "+Inf"


@pytest.mark.parametrize(
    ("kind", "name"),
    [("counter", "spark_bytes"), ("gauge", "spark_bytes_total"), ("gauge", "spark-bad")],
)
def test_names_against_the_conventions_are_refused(kind: str, name: str) -> None:
    with pytest.raises(ValueError):
        getattr(Metrics(), kind)(name, "help")


def test_a_label_name_must_be_one() -> None:
    with pytest.raises(ValueError):
        Metrics().gauge("spark_x", "x").add(1, __reserved="y")
