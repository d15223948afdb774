"""The overlay release the node runs: the name the ``current`` link of the overlay's install dir
points at, and when the link last changed (an update or a rollback renames a new link over it).
"""

from __future__ import annotations

from spark_exporter.exposition import Metrics
from spark_exporter.source import Report, Settings, SourceError

NAME = "overlay_release"


def configured(settings: Settings) -> bool:
    return settings.overlay_dir is not None


def collect(settings: Settings, metrics: Metrics, report: Report) -> None:
    if settings.overlay_dir is None:
        return
    link = settings.overlay_dir / "current"
    try:
        switched = link.lstat().st_mtime
        target = link.readlink()
    except FileNotFoundError as error:
        raise SourceError("not_found", f"{link}: no release installed ({error})") from error
    except OSError as error:
        raise SourceError("unreadable", f"{link}: {error}") from error
    release = target.name
    metrics.gauge("spark_overlay_release_info", "The overlay release `current` points at.").add(
        1, release=release
    )
    metrics.gauge(
        "spark_overlay_release_switched_timestamp_seconds",
        "When the `current` link last changed (Unix time): an update or a rollback.",
    ).add(switched)
