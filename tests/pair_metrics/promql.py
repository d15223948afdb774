"""What pair_metrics queries: the PromQL of its rules and of its console page, and the metric
names in an expression, so that the tests can hold them to the metrics that exist."""

from __future__ import annotations

import functools
import html
import re
from typing import Any

import yaml

from tests.pair_metrics.render import ROLE, RULES
from tests.spark_exporter.contract import CONTRACT

CONSOLE = ROLE / "files/consoles/pair.html"
NAMES_FILE = ROLE / "files/vllm_metric_names.yml"

# node_exporter's and HAProxy's (promex, 2.4 on) names the rules use; Prometheus's own `up`.
NODE_EXPORTER = frozenset(
    {"node_memory_MemAvailable_bytes", "node_memory_SwapTotal_bytes", "node_memory_SwapFree_bytes"}
)
HAPROXY = frozenset({"haproxy_backend_active_servers", "haproxy_backend_status"})
PROMETHEUS = frozenset({"up"})
# The Spark exporter's metrics, as its role publishes them.
SPARK_EXPORTER = frozenset(CONTRACT)
KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "by", "without", "on", "ignoring", "offset", "inf", "nan"}
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_NAME = re.compile(r"(?<![\w.:])([A-Za-z_:][\w:]*)(\s*\()?")
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects (functions, keywords, labels and durations aside)."""
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = _GROUPING.sub("", text)
    text = re.sub(r"\b(?:group_left|group_right)\b", "", text)
    names = {match.group(1) for match in _NAME.finditer(text) if not match.group(2)}
    return {name for name in names if name not in KEYWORDS and not re.fullmatch(r"\d.*", name)}


@functools.cache
def rules() -> list[dict[str, Any]]:
    """Every rule of every rules file, with the file's name as `file`."""
    found = []
    for path in sorted(RULES.glob("*.yml")):
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]:
            found.extend({**rule, "file": path.name} for rule in group["rules"])
    return found


def recorded() -> set[str]:
    return {rule["record"] for rule in rules() if "record" in rule}


def rule_exprs() -> list[str]:
    return [str(rule["expr"]) for rule in rules()]


def console_exprs(page: str | None = None) -> list[str]:
    """The console's queries: those of its tables (in the template's `query` and `printf`) and
    of its graphs (`expr:` of each PromConsole.Graph, from the page served when given, else from
    the template with the pair's placeholder)."""
    template = CONSOLE.read_text(encoding="utf-8")
    found = re.findall(r'query "([^"]+)"', template)
    found += re.findall(r'printf "([^"]+)"', template)
    graphs = page if page is not None else template
    for block in re.findall(r"expr: (\[.*?\]|\".*?\"),?\n", graphs, flags=re.DOTALL):
        found += [html.unescape(s) for s in re.findall(r'"((?:[^"\\]|\\.)*)"', block)]
    return [e.replace("{{ .Params.pair }}", "pair_one").replace("%s", "pair_one") for e in found]


@functools.cache
def vllm_names() -> dict[str, dict[str, Any]]:
    """files/vllm_metric_names.yml's metrics, by name."""
    listed = yaml.safe_load(NAMES_FILE.read_text(encoding="utf-8"))["metrics"]
    return {entry["name"]: entry for entry in listed}


def base_name(name: str, known: set[str] | frozenset[str]) -> str:
    """A histogram's series (name_bucket, _sum, _count) by its family's name."""
    for suffix in HISTOGRAM_SERIES:
        if name.endswith(suffix) and name.removesuffix(suffix) in known:
            return name.removesuffix(suffix)
    return name
