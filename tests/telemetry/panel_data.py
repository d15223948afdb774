#!/usr/bin/env python3
"""Whether every panel of a pair's Grafana dashboard has data: each panel query evaluated as an
instant query against the Prometheus HTTP API that the dashboards read.

A panel query has data when it returns at least one series with a value that is a number (NaN,
what a quantile over a window without requests gives, draws nothing). It fails when it returns
no series, only NaN, or an error. Annotation queries (titled `annotation: ...`) mark events and
find series only around one: they must evaluate, and may be empty. The queries are
panel_queries(pair) of the pair_dashboards role, or a file the role renders
(queries/pair-<pair>.json: [{"title", "promql"}]). Exit 0 when every panel has data, 1 naming
those that have none, 2 on a wrong argument. Only loopback or private (lab) addresses.

    panel_data.py --prometheus http://172.17.0.5:9090 --pair pair_one --report panels.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # run as a script: request_stream's address check, from the repo
    sys.path.insert(0, str(REPO))
from tests.update.request_stream import TargetNotAllowedError, check_target  # noqa: E402 (above)

ANNOTATION = "annotation: "
OK = "ok"
EVENTS = "events"  # an annotation query: evaluated, empty or not
EMPTY = "no series"
NAN = "only NaN"
ERROR = "error"


@dataclass(frozen=True)
class PanelResult:
    title: str
    promql: str
    status: str
    series: int
    error: str = ""

    @property
    def failed(self) -> bool:
        return self.status not in (OK, EVENTS)


def dashboard_queries(pair: str) -> list[tuple[str, str]]:
    """(title, PromQL) of every panel and annotation of the pair's dashboard, from the role."""
    module_utils = str(REPO / "roles/pair_dashboards/module_utils")
    if module_utils not in sys.path:
        sys.path.insert(0, module_utils)
    from pair_dashboards.dashboard import panel_queries

    return panel_queries(pair)


def file_queries(path: Path) -> list[tuple[str, str]]:
    """(title, PromQL) from a queries file the pair_dashboards role renders."""
    document = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(document, list) or not all(
        isinstance(q, dict) and isinstance(q.get("title"), str) and isinstance(q.get("promql"), str)
        for q in document
    ):
        raise ValueError(f'{path}: not a list of {{"title": ..., "promql": ...}}')
    return [(q["title"], q["promql"]) for q in document]


def prometheus_base(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r}: give Prometheus as http://host:port")
    check_target(parts.hostname)
    return url.rstrip("/")


def instant_query(base: str, expr: str, timeout_s: float) -> dict[str, Any]:
    """Prometheus's answer to /api/v1/query: its JSON, an error answer's included."""
    data = urllib.parse.urlencode({"query": expr}).encode()
    request = urllib.request.Request(f"{base}/api/v1/query", data=data, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            answer: dict[str, Any] = json.loads(response.read())
    except urllib.error.HTTPError as error:  # 400 and 422 carry Prometheus's reason
        body = error.read()
        try:
            answer = json.loads(body)
        except ValueError:
            return {"status": "error", "error": f"HTTP {error.code}: {body[:200]!r}"}
    return answer


def _values(result_type: str, result: Any) -> list[str]:
    if result_type == "vector":
        return [series["value"][1] for series in result]
    if result_type == "matrix":
        return [value for series in result for _, value in series["values"]]
    if result_type in ("scalar", "string"):
        return [result[1]]
    raise ValueError(f"unknown result type {result_type!r}")


def judge(title: str, expr: str, answer: dict[str, Any]) -> PanelResult:
    """What one query's answer means for its panel."""
    if answer.get("status") != "success":
        reason = f"{answer.get('errorType', '')} {answer.get('error', answer)}".strip()
        return PanelResult(title, expr, ERROR, 0, reason)
    data = answer["data"]
    values = _values(data["resultType"], data["result"])
    series = len(data["result"]) if data["resultType"] in ("vector", "matrix") else 1
    if title.startswith(ANNOTATION):
        return PanelResult(title, expr, EVENTS, series)
    if not series:
        return PanelResult(title, expr, EMPTY, 0)
    if all(math.isnan(float(value)) for value in values):
        return PanelResult(title, expr, NAN, series)
    return PanelResult(title, expr, OK, series)


def evaluate(
    base: str, queries: Sequence[tuple[str, str]], timeout_s: float = 10.0
) -> list[PanelResult]:
    results = []
    for title, expr in queries:
        try:
            answer = instant_query(base, expr, timeout_s)
        except (OSError, ValueError) as exc:
            answer = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
        results.append(judge(title, expr, answer))
    return results


def summary(results: Sequence[PanelResult]) -> str:
    lines = []
    for result in results:
        detail = f" ({result.error})" if result.error else ""
        lines.append(f"{result.status:>9}  {result.series:>3} series  {result.title}{detail}")
    failed = [result.title for result in results if result.failed]
    if failed:
        lines.append(f"{len(failed)} of {len(results)} panel queries have no data: {failed}")
    else:
        lines.append(f"all {len(results)} panel queries have data")
    return "\n".join(lines)


def report(prometheus: str, pair: str, results: Sequence[PanelResult]) -> dict[str, Any]:
    return {
        "prometheus": prometheus,
        "pair": pair,
        "panels": [asdict(result) for result in results],
        "failed": [result.title for result in results if result.failed],
    }


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prometheus", required=True, help="base URL, e.g. http://172.17.0.5:9090")
    parser.add_argument("--pair", required=True, help="the pair's inventory group")
    parser.add_argument(
        "--queries", type=Path, help="queries/pair-<pair>.json (default: the role's panel_queries)"
    )
    parser.add_argument("--report", type=Path, help="write the JSON report here")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per query")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        base = prometheus_base(args.prometheus)
        queries = file_queries(args.queries) if args.queries else dashboard_queries(args.pair)
        if not queries:
            raise ValueError("no panel query to evaluate")
    except (ValueError, OSError, TargetNotAllowedError) as exc:
        print(f"panel_data: {exc}", file=sys.stderr)
        return 2
    results = evaluate(base, queries, args.timeout)
    print(summary(results), flush=True)
    if args.report is not None:
        document = report(base, args.pair, results)
        args.report.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return 1 if any(result.failed for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())
