"""How often each path of the dual-path overlay ran, summed over the service's processes.

Each process of the service writes its counts to ``<stats dir>/<host>-<pid>.json``
(vllm_dualpath.calls: ``{"calls": {"marlin": n, "unpack": m}, ...}``); the service keeps one
subdirectory per unit under the stats dir and empties it at each start, so the sum is a counter
that starts again with the service. Files are read with json, like ``python -m
vllm_dualpath.calls DIR``; one that cannot be read or parsed (a partial copy) is skipped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spark_exporter.exposition import Metrics
from spark_exporter.source import Report, Settings, SourceError

NAME = "overlay_calls"
KNOWN_PATHS = ("marlin", "unpack")
MAX_PATHS = 16  # a bound on the label's values, whatever a file holds


def configured(settings: Settings) -> bool:
    return settings.overlay_stats_dir is not None


def calls_of(document: Any) -> dict[str, int] | None:
    if not isinstance(document, dict) or not isinstance(document.get("calls"), dict):
        return None
    calls: dict[str, int] = {}
    for path, value in document["calls"].items():
        if not isinstance(path, str) or isinstance(value, bool) or not isinstance(value, int):
            return None
        if value < 0:
            return None
        calls[path] = value
    return calls


def stats_files(directory: Path) -> list[Path]:
    return sorted([*directory.glob("*.json"), *directory.glob("*/*.json")])


def collect(settings: Settings, metrics: Metrics, report: Report) -> None:
    directory = settings.overlay_stats_dir
    if directory is None:
        return
    if not directory.is_dir():
        raise SourceError("not_found", f"{directory} is not a directory")
    total = dict.fromkeys(KNOWN_PATHS, 0)
    processes = 0
    for file in stats_files(directory):
        try:
            calls = calls_of(json.loads(file.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
        if calls is None:
            continue
        processes += 1
        for path, count in calls.items():
            if path in total or len(total) < MAX_PATHS:
                total[path] = total.get(path, 0) + count
    family = metrics.counter(
        "spark_overlay_calls_total",
        "Calls of the dual-path op by path, summed over the service's processes since its start.",
    )
    for path, count in total.items():
        family.add(count, path=path)
    metrics.gauge(
        "spark_overlay_processes", "Service processes whose overlay call counts were read."
    ).add(processes)
