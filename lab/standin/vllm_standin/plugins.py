"""Load `vllm.general_plugins` entry points the way vLLM's `load_general_plugins` does.

Same discovery (importlib.metadata entry points of the group), same filter (VLLM_PLUGINS, a
comma-separated list; unset means all), same consequences: a plugin that fails to import is
logged and skipped; a plugin whose register function raises stops the process.
"""

from __future__ import annotations

import logging
import os
import traceback
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from importlib.metadata import entry_points

GROUP = "vllm.general_plugins"
logger = logging.getLogger("vllm.plugins")


class PluginCallError(RuntimeError):
    """A plugin's register function raised: vLLM does not start in that case either."""


@dataclass
class PluginReport:
    name: str
    value: str
    distribution: str
    version: str
    location: str
    status: str  # "called", "load_failed", "not_allowed"
    error: str = ""


def allowed_plugins(env: Mapping[str, str]) -> list[str] | None:
    if "VLLM_PLUGINS" not in env:
        return None
    return env["VLLM_PLUGINS"].split(",")


def load_general_plugins(env: Mapping[str, str] | None = None) -> list[dict[str, str]]:
    env = os.environ if env is None else env
    allowed = allowed_plugins(env)
    discovered = list(entry_points(group=GROUP))
    logger.info("Available plugins for group %s:", GROUP)
    for plugin in discovered:
        logger.info("- %s -> %s", plugin.name, plugin.value)
    reports: list[PluginReport] = []
    for plugin in discovered:
        dist = plugin.dist
        report = PluginReport(
            name=plugin.name,
            value=plugin.value,
            distribution=dist.metadata["Name"] if dist else "",
            version=dist.version if dist else "",
            location=str(dist.locate_file("")) if dist else "",
            status="not_allowed",
        )
        reports.append(report)
        if allowed is not None and plugin.name not in allowed:
            continue
        logger.info("Loading plugin %s", plugin.name)
        try:
            register = plugin.load()
        except Exception:
            logger.exception("Failed to load plugin %s", plugin.name)
            report.status = "load_failed"
            report.error = traceback.format_exc(limit=5)
            continue
        try:
            register()
        except Exception as exc:
            raise PluginCallError(f"plugin {plugin.name} ({plugin.value}) raised: {exc!r}") from exc
        report.status = "called"
    return [asdict(report) for report in reports]
