"""Prometheus text exposition format 0.0.4: HELP and TYPE before each family's samples, label
values and help text escaped, counters named ``*_total``."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
KINDS = ("gauge", "counter")


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 2**63:
        return str(int(value))
    return repr(float(value))


@dataclass
class Family:
    """One metric: its name, type, help and samples (labels, value)."""

    name: str
    kind: str
    help: str
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"not a metric name: {self.name!r}")
        if self.kind not in KINDS:
            raise ValueError(f"{self.name}: unknown type {self.kind!r}")
        if (self.kind == "counter") != self.name.endswith("_total"):
            raise ValueError(f"{self.name}: counters, and only counters, end in _total")

    def add(self, value: float, **labels: str) -> None:
        for label in labels:
            if not _LABEL.match(label) or label.startswith("__"):
                raise ValueError(f"{self.name}: not a label name: {label!r}")
        self.samples.append((labels, float(value)))

    def lines(self) -> Iterable[str]:
        yield f"# HELP {self.name} {escape_help(self.help)}"
        yield f"# TYPE {self.name} {self.kind}"
        for labels, value in self.samples:
            if labels:
                inner = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in labels.items())
                yield f"{self.name}{{{inner}}} {format_value(value)}"
            else:
                yield f"{self.name} {format_value(value)}"


class Metrics:
    """The families of one scrape, in the order they were first asked for."""

    def __init__(self) -> None:
        self._families: dict[str, Family] = {}

    def gauge(self, name: str, help_text: str) -> Family:
        return self._family(name, "gauge", help_text)

    def counter(self, name: str, help_text: str) -> Family:
        return self._family(name, "counter", help_text)

    def _family(self, name: str, kind: str, help_text: str) -> Family:
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = Family(name, kind, help_text)
        elif family.kind != kind:
            raise ValueError(f"{name} asked for as {kind} and as {family.kind}")
        return family

    def render(self) -> str:
        """The exposition; a family without samples is left out."""
        lines = [line for f in self._families.values() if f.samples for line in f.lines()]
        return "\n".join(lines) + "\n" if lines else ""
