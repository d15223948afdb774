"""Judge a pair from its nodes' observations: every finding, the counts per severity and the
report as text lines, errors first.

Deciding whether errors fail the run is the caller's (the role's judge.yml).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, fields
from typing import Any

from .checks import CHECKS, Expectations, Observations, diagnose
from .findings import Severity

ORDER = (Severity.ERROR, Severity.WARNING, Severity.SKIPPED, Severity.OK)


def expectations_from(raw: Mapping[str, Any]) -> Expectations:
    known = {field.name for field in fields(Expectations)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"unknown expectations: {', '.join(unknown)}")
    values = dict(raw)
    if "rail_interfaces" in values:
        values["rail_interfaces"] = tuple(values["rail_interfaces"])
    return Expectations(**values)


def judge(
    observations: Observations,
    expectations: Mapping[str, Any] | None = None,
    only: Sequence[str] = (),
) -> dict[str, Any]:
    """Raises ValueError for an unknown check or expectation, KeyError for an incomplete
    observation."""
    unknown = sorted(set(only) - set(CHECKS))
    if unknown:
        raise ValueError(f"unknown checks: {', '.join(unknown)} (known: {', '.join(CHECKS)})")
    findings = diagnose(observations, expectations_from(expectations or {}), tuple(only))
    findings.sort(key=lambda finding: ORDER.index(finding.severity))
    counts = Counter(finding.severity.value for finding in findings)
    return {
        "findings": [{**asdict(f), "severity": f.severity.value} for f in findings],
        "counts": {severity.value: counts.get(severity.value, 0) for severity in ORDER},
        "text": [line for finding in findings for line in finding.line().splitlines()],
    }
