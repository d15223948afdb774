"""One Grafana dashboard per Spark pair, and the PromQL behind each of its panels.

    from pair_dashboards.dashboard import dashboard, panel_queries
    dashboard("pair_one")        # the dashboard's JSON model (Grafana 12, schemaVersion 41)
    panel_queries("pair_one")    # [(title, PromQL)], ready to evaluate against Prometheus

Every query selects its pair (`{pair="<name>"}`, a label every scrape of the pair carries, with
`node`, `rank` and the jobs vllm, node, spark and front_door), so one Prometheus serves every
pair's dashboard. The serving panels read vLLM's own metrics from rank 0's /metrics; memory,
GPU, rail and overlay panels the Spark exporter's and node_exporter's, per node. Overlay
release switches (an update or a rollback) are annotations. `check` is what the role asks of a
rendered dashboard before it ships it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Final

from .metric_names import KNOWN

DATASOURCE_UID: Final = "dualspark-prometheus"
SCHEMA_VERSION: Final = 41  # Grafana 12.0's; later releases migrate it on load
RATE_INTERVAL: Final = "$__rate_interval"  # Grafana's: at least four scrape intervals
# What panel_queries puts in place of Grafana's interval variables, for Prometheus itself.
EVAL_WINDOW: Final = "1m"
UID_MAX: Final = 40  # Grafana refuses longer dashboard UIDs
WIDTH: Final = 24
PANEL_HEIGHT: Final = 8


@dataclass(frozen=True)
class Target:
    legend: str  # Grafana's legendFormat ({{node}} etc.); also names the query in panel_queries
    expr: str
    instant: bool = False


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    unit: str
    targets: tuple[Target, ...]
    kind: str = "timeseries"
    max_value: float | None = None
    floors: str = ""  # a regex of series drawn as a dashed red limit line
    overrides: tuple[dict[str, Any], ...] = field(default=())


def selector(pair: str) -> str:
    """{pair="<name>"}, the label matcher every query of the pair's dashboard carries."""
    escaped = pair.replace("\\", "\\\\").replace('"', '\\"')
    return f'{{pair="{escaped}"}}'


def uid(pair: str) -> str:
    """The dashboard's UID: stable per pair, within Grafana's limits (a digest stands in for
    the end of a name too long, so two long names never share one)."""
    readable = "dualspark-" + re.sub(r"[^A-Za-z0-9_-]", "-", pair)
    if len(readable) <= UID_MAX and readable == f"dualspark-{pair}":
        return readable
    digest = hashlib.sha256(pair.encode()).hexdigest()[:10]
    return f"{readable[: UID_MAX - len(digest) - 1]}-{digest}"


def quantiles(histogram: str, s: str) -> tuple[Target, ...]:
    rate = f"sum by (le) (rate({histogram}_bucket{s}[{RATE_INTERVAL}]))"
    return tuple(Target(f"p{q}", f"histogram_quantile(0.{q}, {rate})") for q in (50, 95))


def rows(pair: str) -> list[tuple[str, list[Panel]]]:
    """The dashboard's rows and their panels, in order."""
    s = selector(pair)
    ri = RATE_INTERVAL
    serving = [
        Panel(
            "Prefill tokens/s",
            "Prompt tokens the engine processed per second (vllm:prompt_tokens_total).",
            "short",
            (Target("prefill", f"sum(rate(vllm:prompt_tokens_total{s}[{ri}]))"),),
        ),
        Panel(
            "Decode tokens/s",
            "Tokens the engine generated per second (vllm:generation_tokens_total).",
            "short",
            (Target("decode", f"sum(rate(vllm:generation_tokens_total{s}[{ri}]))"),),
        ),
        Panel(
            "Time to first token",
            "Median and 95th percentile from arrival to the first token.",
            "s",
            quantiles("vllm:time_to_first_token_seconds", s),
        ),
        Panel(
            "Inter-token latency",
            "Median and 95th percentile between two generated tokens of a request.",
            "s",
            quantiles("vllm:inter_token_latency_seconds", s),
        ),
        Panel(
            "Requests running and waiting",
            "Requests in the engine's batch, and those waiting for a slot (--max-num-seqs).",
            "short",
            (
                Target("running", f"sum(vllm:num_requests_running{s})"),
                Target("waiting", f"sum(vllm:num_requests_waiting{s})"),
            ),
        ),
        Panel(
            "KV-cache use",
            "Share of the KV cache the running requests hold.",
            "percentunit",
            (Target("KV cache", f"max(vllm:kv_cache_usage_perc{s})"),),
            max_value=1,
        ),
        Panel(
            "Requests finished by reason",
            "Requests finished per second: length, stop, abort (drained or cut off), error.",
            "reqps",
            (
                Target(
                    "{{finished_reason}}",
                    f"sum by (finished_reason) (rate(vllm:request_success_total{s}[{ri}]))",
                ),
            ),
        ),
    ]
    memory = [
        Panel(
            "Free memory per box",
            "Unified memory free for the service on each Spark against the floor below which "
            "a launch is refused (the dashed red line); node_exporter's MemAvailable beside it.",
            "bytes",
            (
                Target("{{node}} available", f"spark_memory_available_bytes{s}"),
                Target("{{node}} floor", f"spark_memory_floor_bytes{s}"),
                Target("{{node}} MemAvailable", f"node_memory_MemAvailable_bytes{s}"),
            ),
            floors=".* floor",
        ),
        Panel(
            "Swap used per box",
            "Swap in use on each Spark: a GB10 under memory pressure wedges rather than OOMs.",
            "bytes",
            (
                Target("{{node}}", f"spark_swap_used_bytes{s}"),
                Target(
                    "{{node}} (node_exporter)",
                    f"node_memory_SwapTotal_bytes{s} - node_memory_SwapFree_bytes{s}",
                ),
            ),
        ),
    ]
    gpu = [
        Panel(
            "GPU power",
            "Power draw of each Spark's GB10.",
            "watt",
            (Target("{{node}}", f"spark_gpu_power_watts{s}"),),
        ),
        Panel(
            "GPU temperature",
            "GPU temperature of each Spark.",
            "celsius",
            (Target("{{node}}", f"spark_gpu_temperature_celsius{s}"),),
        ),
        Panel(
            "GPU SM clock",
            "SM clock of each Spark against its maximum (dashed).",
            "rotmhz",
            (
                Target("{{node}}", f"spark_gpu_clock_sm_mhz{s}"),
                Target("{{node}} max", f"spark_gpu_clock_sm_max_mhz{s}"),
            ),
            floors=".* max",
        ),
        Panel(
            "GPU throttling",
            "Throttle reasons active on each Spark (1: active).",
            "short",
            (
                Target(
                    "{{node}} {{reason}}", f"max by (node, reason) (spark_gpu_throttle_active{s})"
                ),
            ),
        ),
    ]
    rail = [
        Panel(
            "Rail transmit per twin",
            "Bytes sent per second on each port twin of the ConnectX-7 rail.",
            "Bps",
            (
                Target(
                    "{{node}} {{twin}}",
                    f"sum by (node, twin) (rate(spark_rail_transmit_bytes_total{s}[{ri}]))",
                ),
            ),
        ),
        Panel(
            "Rail receive per twin",
            "Bytes received per second on each port twin of the ConnectX-7 rail.",
            "Bps",
            (
                Target(
                    "{{node}} {{twin}}",
                    f"sum by (node, twin) (rate(spark_rail_receive_bytes_total{s}[{ri}]))",
                ),
            ),
        ),
        Panel(
            "Rail links up",
            "Link state of each twin (1: up).",
            "short",
            (Target("{{node}} {{twin}}", f"spark_rail_link_up{s}"),),
        ),
        Panel(
            "Overlay calls/s by path",
            "Dense FP8 calls per second through the dual-path overlay, by path (Marlin or "
            "unpack + cuBLAS).",
            "short",
            (
                Target(
                    "{{node}} {{path}}",
                    f"sum by (node, path) (rate(spark_overlay_calls_total{s}[{ri}]))",
                ),
            ),
        ),
    ]
    release = [
        Panel(
            "Overlay release per box",
            "The overlay release each Spark runs now.",
            "none",
            (Target("{{node}}", f"spark_overlay_release_info{s}", instant=True),),
            kind="table",
        ),
    ]
    return [
        ("Serving", serving),
        ("Memory", memory),
        ("GPU", gpu),
        ("Rail and overlay", rail + release),
    ]


def annotations(pair: str) -> list[tuple[str, str, str]]:
    """(name, expr, title) of the annotation queries: an overlay release switch on a node
    (update or rollback), named by the release it switched to."""
    s = selector(pair)
    switched = f"changes(spark_overlay_release_switched_timestamp_seconds{s}[1m]) > 0"
    expr = f"spark_overlay_release_info{s} and on (pair, node) ({switched})"
    return [("Overlay release switched", expr, "{{node}} switched to {{release}}")]


def dashboard(pair: str, datasource_uid: str = DATASOURCE_UID) -> dict[str, Any]:
    """The pair's dashboard as Grafana's JSON model."""
    source = {"type": "prometheus", "uid": datasource_uid}
    panels: list[dict[str, Any]] = []
    y = 0
    for row_title, row_panels in rows(pair):
        panels.append(
            {
                "type": "row",
                "id": len(panels) + 1,
                "title": row_title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": WIDTH, "x": 0, "y": y},
                "panels": [],
            }
        )
        y += 1
        for index, panel in enumerate(row_panels):
            x = (index % 2) * WIDTH // 2
            if index and not index % 2:
                y += PANEL_HEIGHT
            panels.append(_panel(panel, len(panels) + 1, source, x, y))
        y += PANEL_HEIGHT
    builtin = {
        "builtIn": 1,
        "datasource": {"type": "grafana", "uid": "-- Grafana --"},
        "enable": True,
        "hide": True,
        "iconColor": "rgba(0, 211, 255, 1)",
        "name": "Annotations & Alerts",
        "type": "dashboard",
    }
    queries = [
        {
            "datasource": source,
            "enable": True,
            "iconColor": "orange",
            "name": name,
            "expr": expr,
            "step": "1m",
            "titleFormat": title,
            "tagKeys": "node,release",
        }
        for name, expr, title in annotations(pair)
    ]
    return {
        "uid": uid(pair),
        "title": f"dualspark {pair}",
        "description": f"The Spark pair {pair}: vLLM serving, memory, GPU, rail and overlay.",
        "tags": ["dualspark", pair],
        "timezone": "browser",
        "editable": False,
        "graphTooltip": 1,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "schemaVersion": SCHEMA_VERSION,
        "annotations": {"list": [builtin, *queries]},
        "templating": {"list": []},
        "links": [],
        "panels": panels,
    }


def _panel(panel: Panel, number: int, source: dict[str, str], x: int, y: int) -> dict[str, Any]:
    targets = [
        {
            "refId": chr(ord("A") + index),
            "datasource": source,
            "expr": target.expr,
            "legendFormat": target.legend,
            "editorMode": "code",
            **({"instant": True, "range": False, "format": "table"} if target.instant else {}),
            **({} if target.instant else {"range": True}),
        }
        for index, target in enumerate(panel.targets)
    ]
    defaults: dict[str, Any] = {"unit": panel.unit}
    if panel.kind == "timeseries":
        defaults["min"] = 0
        defaults["custom"] = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10}
    if panel.max_value is not None:
        defaults["max"] = panel.max_value
    overrides = list(panel.overrides)
    if panel.floors:
        overrides.append(
            {
                "matcher": {"id": "byRegexp", "options": panel.floors},
                "properties": [
                    {"id": "color", "value": {"mode": "fixed", "fixedColor": "red"}},
                    {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
                    {"id": "custom.fillOpacity", "value": 0},
                ],
            }
        )
    options: dict[str, Any]
    if panel.kind == "table":
        options = {"showHeader": True, "cellHeight": "sm"}
    else:
        legend = {"displayMode": "list", "placement": "bottom", "showLegend": True, "calcs": []}
        options = {"legend": legend, "tooltip": {"mode": "multi", "sort": "none"}}
    transformations = []
    if panel.kind == "table":  # one row per node: its release, without the instant's time
        columns = {"Time": True, "Value": True, "__name__": True, "job": True, "instance": True}
        transformations.append({"id": "organize", "options": {"excludeByName": columns}})
    return {
        "type": panel.kind,
        "id": number,
        "title": panel.title,
        "description": panel.description,
        "datasource": source,
        "gridPos": {"h": PANEL_HEIGHT, "w": WIDTH // 2, "x": x, "y": y},
        "targets": targets,
        "fieldConfig": {"defaults": defaults, "overrides": overrides},
        "options": options,
        "transformations": transformations,
    }


def panel_queries(pair: str) -> list[tuple[str, str]]:
    """(title, PromQL) of every panel target and annotation of the pair's dashboard, with
    Grafana's interval variables replaced by EVAL_WINDOW so Prometheus can evaluate them."""
    queries: list[tuple[str, str]] = []
    for _, row_panels in rows(pair):
        for panel in row_panels:
            for target in panel.targets:
                queries.append((f"{panel.title}: {target.legend}", evaluable(target.expr)))
    for name, expr, _ in annotations(pair):
        queries.append((f"annotation: {name}", evaluable(expr)))
    return queries


def evaluable(expr: str) -> str:
    return re.sub(r"\$__(rate_)?interval\b", EVAL_WINDOW, expr)


def dashboard_queries(model: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, expr) of every query a dashboard's JSON model holds: panel targets, annotations."""
    found = [
        (f"panel {panel.get('title')!r} target {target.get('refId')}", str(target.get("expr")))
        for panel in model.get("panels", [])
        for target in panel.get("targets", [])
    ]
    for annotation in model.get("annotations", {}).get("list", []):
        if annotation.get("expr") is not None:
            found.append((f"annotation {annotation.get('name')!r}", str(annotation["expr"])))
    return found


def check(model: dict[str, Any], pair: str, datasource_uid: str = DATASOURCE_UID) -> list[str]:
    """What the role refuses in a rendered dashboard; [] when it may ship."""
    problems = []
    if model.get("uid") != uid(pair):
        problems.append(f"uid {model.get('uid')!r} is not the pair's {uid(pair)!r}")
    wanted = {"type": "prometheus", "uid": datasource_uid}
    for panel in model.get("panels", []):
        if panel.get("type") == "row":
            continue
        title = panel.get("title")
        if not panel.get("targets"):
            problems.append(f"panel {title!r} has no query")
        if panel.get("datasource") != wanted:
            problems.append(f"panel {title!r} does not query the datasource {datasource_uid}")
        problems += [
            f"panel {title!r} target {t.get('refId')}: datasource is not {datasource_uid}"
            for t in panel.get("targets", [])
            if t.get("datasource") != wanted
        ]
    for where, expr in dashboard_queries(model):
        if not balanced(expr):
            problems.append(f"{where}: unbalanced brackets: {expr}")
        names = re.findall(r"([A-Za-z_:][A-Za-z0-9_:]*)\{", expr)
        if not names:
            problems.append(f"{where}: selects no metric with labels: {expr}")
        problems += [f"{where}: no exporter serves {name}" for name in names if name not in KNOWN]
        if expr.count(selector(pair)) != len(names):
            problems.append(f"{where}: a selector does not select {selector(pair)}: {expr}")
    return problems


def balanced(expr: str) -> bool:
    """Whether (), [] and {} pair up outside the string literals of a query."""
    closing = {")": "(", "]": "[", "}": "{"}
    stack: list[str] = []
    for char in re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr):
        if char in "([{":
            stack.append(char)
        elif char in closing and (not stack or stack.pop() != closing[char]):
            return False
    return not stack
