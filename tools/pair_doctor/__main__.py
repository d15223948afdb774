"""Command line: judge a pair from its nodes' observations and print the findings as JSON.

    python -m tools.pair_doctor < '{"observations": {host: ...}, "expectations": {...}, "only": []}'

The JSON holds every finding, the counts per severity and the report as text lines; deciding
whether errors fail the run is the caller's (the doctor playbook's).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import asdict, fields
from typing import Any

from tools.pair_doctor.checks import CHECKS, Expectations, diagnose
from tools.pair_doctor.findings import Severity

ORDER = (Severity.ERROR, Severity.WARNING, Severity.SKIPPED, Severity.OK)


def expectations_from(raw: dict[str, Any]) -> Expectations:
    known = {field.name for field in fields(Expectations)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"unknown expectations: {', '.join(unknown)}")
    values = dict(raw)
    if "rail_interfaces" in values:
        values["rail_interfaces"] = tuple(values["rail_interfaces"])
    return Expectations(**values)


def run(request: dict[str, Any]) -> dict[str, Any]:
    only = tuple(request.get("only") or ())
    unknown = sorted(set(only) - set(CHECKS))
    if unknown:
        raise ValueError(f"unknown checks: {', '.join(unknown)} (known: {', '.join(CHECKS)})")
    findings = diagnose(
        request["observations"], expectations_from(request.get("expectations") or {}), only
    )
    findings.sort(key=lambda finding: ORDER.index(finding.severity))
    counts = Counter(finding.severity.value for finding in findings)
    return {
        "findings": [{**asdict(f), "severity": f.severity.value} for f in findings],
        "counts": {severity.value: counts.get(severity.value, 0) for severity in ORDER},
        "text": [line for finding in findings for line in finding.line().splitlines()],
    }


def main() -> int:
    try:
        print(json.dumps(run(json.load(sys.stdin)), indent=2))
    except (ValueError, KeyError) as error:
        print(json.dumps({"error": f"{type(error).__name__}: {error}"}))
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
