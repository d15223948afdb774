"""Every pair's dashboard, rendered by the role for the lab and production inventories, is one
Grafana takes (its own typed models, grafana_model.py) and queries what exists, of its pair only.

PromQL is read by a real parser (promql-parser); the metric names a panel may use are the union
of vLLM's (the stand-in's families, held to the pinned vLLM's source by
tests/service/test_standin_metrics.py), the Spark exporter's and node_exporter's.
"""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml
from pair_dashboards import dashboard, metric_names
from vllm_standin import metrics as standin_metrics

from tests.helpers import REPO, output_of, run_local_play
from tests.pair_dashboards import grafana_model
from tests.spark_exporter.contract import CONTRACT

ROLE = REPO / "roles/pair_dashboards"
INVENTORIES = ("lab", "production")
SERVED = set(standin_metrics.exposed_names()) | set(CONTRACT) | metric_names.NODE


def render(out: Path, inventory: str, **extra: Any) -> tuple[int, str]:
    """The role's render entry point on the controller, with the inventory's pairs."""
    play = [
        {
            "name": "Render the dashboards",
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Render and check",
                    "ansible.builtin.include_role": {
                        "name": "pair_dashboards",
                        "tasks_from": "render",
                    },
                    "vars": {"pair_dashboards_render_dir": str(out), **extra},
                }
            ],
        }
    ]
    inventory_file = REPO / f"inventory/{inventory}/hosts.yml"
    result = run_local_play(
        out.parent / "play",
        play,
        f"ANSIBLE_ROLES_PATH={REPO / 'roles'}",
        # The controller itself, whatever connection the inventory gives its hosts.
        args=["-i", str(inventory_file), "-e", "ansible_connection=local"],
    )
    return result.returncode, output_of(result)


def inventory_pairs(inventory: str) -> list[str]:
    hosts = yaml.safe_load((REPO / f"inventory/{inventory}/hosts.yml").read_text(encoding="utf-8"))
    return sorted(hosts["dualspark"]["children"])


@pytest.fixture(scope="module", params=INVENTORIES)
def rendered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp(request.param) / "render"
    code, output = render(out, request.param)
    assert code == 0, output
    return out


def models(rendered: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    paths = sorted((rendered / "dashboards").glob("pair-*.json"))
    assert paths, f"no dashboard in {rendered}"
    for path in paths:
        yield path.stem.removeprefix("pair-"), json.loads(path.read_text(encoding="utf-8"))


def selectors(node: Any) -> Iterator[Any]:
    """Every vector selector of a parsed PromQL expression."""
    if isinstance(node, promql_parser.VectorSelector):
        yield node
    elif isinstance(node, promql_parser.MatrixSelector):
        yield node.vector_selector
    elif isinstance(node, promql_parser.Call):
        for argument in node.args:
            yield from selectors(argument)
    elif isinstance(node, promql_parser.BinaryExpr):
        yield from selectors(node.lhs)
        yield from selectors(node.rhs)
    elif isinstance(node, promql_parser.AggregateExpr):
        yield from selectors(node.expr)
        if node.param is not None:
            yield from selectors(node.param)
    elif isinstance(
        node, promql_parser.ParenExpr | promql_parser.UnaryExpr | promql_parser.SubqueryExpr
    ):
        yield from selectors(node.expr)


def query_problems(expr: str, pair: str) -> list[str]:
    """Why a dashboard query is wrong: not PromQL, a metric no exporter serves, a selector
    that does not select its pair."""
    try:
        parsed = promql_parser.parse(dashboard.evaluable(expr))
    except ValueError as exc:
        return [f"not PromQL ({exc}): {expr}"]
    found = list(selectors(parsed))
    problems = [] if found else [f"selects no metric: {expr}"]
    for selector in found:
        matchers = {(m.name, str(m.op), m.value) for m in selector.matchers.matchers}
        name = selector.name or next((v for n, _, v in matchers if n == "__name__"), None)
        if name not in SERVED:
            problems.append(f"no exporter serves {name!r}: {expr}")
        if ("pair", str(promql_parser.MatchOp.Equal), pair) not in matchers:
            problems.append(f'{name} does not select pair="{pair}": {expr}')
    return problems


def dashboard_problems(model: dict[str, Any], pair: str) -> list[str]:
    problems = []
    for panel in model["panels"]:
        if panel["type"] != "row" and not panel.get("targets"):
            problems.append(f"panel {panel['title']!r} has no query")
    for where, expr in dashboard.dashboard_queries(model):
        problems += [f"{where}: {problem}" for problem in query_problems(expr, pair)]
    return problems


def test_one_dashboard_per_pair_of_the_inventory(rendered: Path) -> None:
    inventory = rendered.parent.name.rstrip("0123456789")  # mktemp's numbering
    assert [pair for pair, _ in models(rendered)] == inventory_pairs(inventory)
    for pair, model in models(rendered):
        assert model["uid"] == dashboard.uid(pair) == f"dualspark-{pair}"


def test_every_dashboard_is_one_grafana_takes(rendered: Path) -> None:
    for pair, model in models(rendered):
        assert grafana_model.problems(model) == [], pair


def test_every_query_is_promql_of_served_metrics_of_its_pair(rendered: Path) -> None:
    for pair, model in models(rendered):
        assert dashboard_problems(model, pair) == [], pair
        annotations = [a for a in model["annotations"]["list"] if "expr" in a]
        assert any(
            "spark_overlay_release_switched_timestamp_seconds" in a["expr"] for a in annotations
        )


def test_the_exported_queries_are_the_dashboards(rendered: Path) -> None:
    for pair, model in models(rendered):
        exported = json.loads((rendered / f"queries/pair-{pair}.json").read_text(encoding="utf-8"))
        assert [(q["title"], q["promql"]) for q in exported] == dashboard.panel_queries(pair)
        in_model = [dashboard.evaluable(expr) for _, expr in dashboard.dashboard_queries(model)]
        assert sorted(in_model) == sorted(q["promql"] for q in exported)
        for title, expr in dashboard.panel_queries(pair):
            assert "$__" not in expr and not query_problems(expr, pair), title


def test_the_provisioning_files_name_the_datasource_and_the_directory(rendered: Path) -> None:
    source = yaml.safe_load((rendered / "provisioning/datasources/prometheus.yml").read_text())
    (datasource,) = source["datasources"]
    assert datasource["uid"] == dashboard.DATASOURCE_UID
    assert (datasource["type"], datasource["url"]) == ("prometheus", "http://127.0.0.1:9090")
    provider = yaml.safe_load((rendered / "provisioning/dashboards/dualspark.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards/dualspark"
    for _, model in models(rendered):
        for panel in model["panels"]:
            for target in panel.get("targets", []):
                assert target["datasource"]["uid"] == dashboard.DATASOURCE_UID


def test_the_roles_metric_lists_are_what_the_exporters_serve() -> None:
    assert set(standin_metrics.exposed_names()) >= metric_names.VLLM
    assert set(CONTRACT) >= metric_names.SPARK


@pytest.mark.parametrize(
    ("spoil", "expected"),
    [
        (
            lambda d: _target(d, 1).update(expr='rate(vllm:prompt_token_total{pair="p"}[5m])'),
            "no exporter serves 'vllm:prompt_token_total'",
        ),
        (
            lambda d: _target(d, 1).update(expr="sum(rate(vllm:prompt_tokens_total[5m]))"),
            'does not select pair="p"',
        ),
        (
            lambda d: _target(d, 1).update(expr='vllm:num_requests_running{pair="other"}'),
            'does not select pair="p"',
        ),
        (
            lambda d: _target(d, 1).update(expr='sum(rate(vllm:prompt_tokens_total{pair="p"}[5m])'),
            "not PromQL",
        ),
        (lambda d: d["panels"][1].update(targets=[]), "has no query"),
    ],
)
def test_a_wrong_query_fails(spoil: Any, expected: str) -> None:
    model = copy.deepcopy(dashboard.dashboard("p"))
    spoil(model)
    assert any(expected in problem for problem in dashboard_problems(model, "p"))
    assert dashboard.check(model, "p"), "the role's own check must refuse it too"


@pytest.mark.parametrize(
    ("spoil", "expected"),
    [
        (lambda d: d["panels"][1].update(type="timeserie"), "no panel plugin 'timeserie'"),
        (
            lambda d: d["panels"][1]["fieldConfig"]["defaults"].update(unitt="s"),
            "unknown to the schema",
        ),
        (lambda d: _target(d, 1).update(legendFromat="x"), "unknown to the schema"),
        (lambda d: d["panels"][1]["gridPos"].update(w="12"), "is not an integer"),
        (lambda d: d["panels"][1]["options"]["legend"].update(displayMode="lists"), "none of"),
        (lambda d: d.update(refresh=30), "is not a str"),
    ],
)
def test_a_dashboard_grafana_would_refuse_fails(spoil: Any, expected: str) -> None:
    model = copy.deepcopy(dashboard.dashboard("p"))
    spoil(model)
    assert any(expected in problem for problem in grafana_model.problems(model))


def _target(model: dict[str, Any], panel: int) -> dict[str, Any]:
    target: dict[str, Any] = model["panels"][panel]["targets"][0]
    return target


def test_uids_are_stable_and_distinct_for_long_names() -> None:
    first, second = (
        "a_very_long_pair_name_of_a_site_" + "x" * 20,
        "a_very_long_pair_name_of_a_site_" + "y" * 20,
    )
    assert dashboard.uid(first) == dashboard.uid(first)
    assert dashboard.uid(first) != dashboard.uid(second)
    assert max(len(dashboard.uid(first)), len(dashboard.uid(second))) <= dashboard.UID_MAX


def test_the_role_refuses_a_tree_that_does_not_match(tmp_path: Path) -> None:
    out = tmp_path / "render"
    code, output = render(out, "lab", pair_dashboards_prometheus_url="http://10.0.0.1:9090")
    assert code == 0, output
    source = out / "provisioning/datasources/prometheus.yml"
    source.write_text(source.read_text().replace("10.0.0.1", "10.0.0.2"), encoding="utf-8")
    shutil.copy(out / "dashboards/pair-lab_pair.json", out / "dashboards/pair-gone.json")
    play = [
        {
            "name": "Check a tampered tree",
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Check",
                    "pair_dashboards_check": {
                        "root": str(out),
                        "pairs": ["lab_pair"],
                        "datasource_uid": dashboard.DATASOURCE_UID,
                        "prometheus_url": "http://10.0.0.1:9090",
                        "dashboards_dir": "/var/lib/grafana/dashboards/dualspark",
                    },
                }
            ],
        }
    ]
    result = run_local_play(
        tmp_path / "check",
        play,
        f"ANSIBLE_LIBRARY={ROLE / 'library'}",
        f"ANSIBLE_MODULE_UTILS={ROLE / 'module_utils'}",
    )
    assert result.returncode != 0
    assert "url is 'http://10.0.0.2:9090', not 'http://10.0.0.1:9090'" in output_of(result)
    assert "dashboards/pair-gone.json: no such pair" in output_of(result)
