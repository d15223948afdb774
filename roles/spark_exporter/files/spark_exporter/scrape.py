"""One scrape: every source read fresh, in turn; a source that fails is named in the exposition
(``spark_exporter_source_up``, ``spark_exporter_source_error_info``) and logged once per change
of its reason, and never stops the others."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection
from types import ModuleType

from spark_exporter import gpu, memory, nccl, overlay_calls, overlay_release, rail, tls
from spark_exporter.exposition import Metrics
from spark_exporter.source import Report, Settings, SourceError

logger = logging.getLogger("spark_exporter")
SOURCES: dict[str, ModuleType] = {
    module.NAME: module for module in (memory, gpu, rail, nccl, overlay_calls, overlay_release, tls)
}

_last_reason: dict[str, str | None] = {}
_log_lock = threading.Lock()


def _say(source: str, reason: str | None, detail: str) -> None:
    """Log a source's failure when its reason changes, and its recovery."""
    with _log_lock:
        before = _last_reason.get(source)
        _last_reason[source] = reason
    if reason == before:
        return
    if reason is None:
        logger.info("source %s reads again", source)
    else:
        logger.warning("source %s: %s (%s)", source, reason, detail)


def scrape(settings: Settings, only: Collection[str] = ()) -> str:
    """The exposition of the sources named in ``only`` (all of them when empty)."""
    metrics = Metrics()
    up = metrics.gauge(
        "spark_exporter_source_up", "1 when the source was read in full this scrape, else 0."
    )
    why = metrics.gauge(
        "spark_exporter_source_error_info",
        "Why a source was not read in full (reason: not_found, unreadable, timeout, failed, "
        "unparsable, error); details in the exporter's journal.",
    )
    took = metrics.gauge("spark_exporter_source_duration_seconds", "How long the source took.")
    for name, module in SOURCES.items():
        if only and name not in only:
            continue
        report = Report()
        started = time.monotonic()
        try:
            module.collect(settings, metrics, report)
        except SourceError as error:
            report.fail(error.reason, error.detail)
        except Exception as error:  # a bug in one source must not take the scrape down
            logger.exception("source %s failed", name)
            report.fail("error", repr(error))
        if not module.configured(settings):
            continue
        took.add(time.monotonic() - started, source=name)
        up.add(0 if report.problems else 1, source=name)
        if report.problems:
            reason, detail = report.problems[0]
            why.add(1, source=name, reason=reason)
            _say(name, reason, detail if len(report.problems) == 1 else f"{detail}; ...")
        else:
            _say(name, None, "")
    return metrics.render()
