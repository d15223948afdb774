"""files/vllm_metric_names.yml against vLLM's own sources, for every version it lists (the
releases the service supports among them): each family it lists exists there with that type,
labels and help text, each family the sources define is listed or left out with a reason, and
`used_by` says what of pair_metrics queries it. Also: what the rules and the console query is a
metric that exists (vLLM's listed here, the Spark exporter's, node_exporter's, HAProxy's, or a
series the rules record)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.helpers import REPO
from tests.pair_metrics import promql, vllm_source

LISTED = yaml.safe_load(promql.NAMES_FILE.read_text(encoding="utf-8"))
VERSIONS = LISTED["versions"]
SERVICE_VARS = REPO / "roles/vllm_tp2_service/vars/main.yml"


def test_the_versions_cover_the_releases_the_service_supports() -> None:
    supported = yaml.safe_load(SERVICE_VARS.read_text(encoding="utf-8"))
    assert set(supported["vllm_tp2_service_marlin_selectors"]) <= set(VERSIONS)
    for entry in LISTED["metrics"]:
        assert set(entry["versions"]) <= set(VERSIONS), entry


@pytest.mark.parametrize("version", VERSIONS)
def test_each_listed_family_is_the_sources_own(version: str) -> None:
    families = vllm_source.families(version)
    assert len(families) >= 40, sorted(families)  # the reader found the stat logger's families
    problems = []
    for entry in LISTED["metrics"]:
        if version not in entry["versions"]:
            assert entry["name"] not in families, f"{entry['name']} is in {version} after all"
            continue
        family = families.get(entry["name"])
        if family is None:
            problems.append(f"{entry['name']}: not defined by vLLM {version}")
            continue
        labels = None if entry["labels"] is None else tuple(entry["labels"])
        seen = {"type": family.type, "labels": family.labels, "help": family.help}
        wanted = {"type": entry["type"], "labels": labels, "help": entry["help"]}
        if seen != wanted:
            problems.append(f"{entry['name']}: vLLM {version} has {seen}, the file {wanted}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_family_of_the_sources_is_listed_or_left_out_with_a_reason(version: str) -> None:
    listed = {entry["name"] for entry in LISTED["metrics"]}
    left_out = LISTED["not_listed"]
    assert all(str(reason).strip() for reason in left_out.values())
    missing = sorted(set(vllm_source.families(version)) - listed - set(left_out))
    assert not missing, f"vLLM {version} defines families the file does not know: {missing}"


def _queried(exprs: list[str]) -> set[str]:
    known = set(promql.vllm_names())
    return {promql.base_name(name, known) for expr in exprs for name in promql.metric_names(expr)}


def test_used_by_says_what_queries_each_family() -> None:
    rules, console = _queried(promql.rule_exprs()), _queried(promql.console_exprs())
    for name, entry in promql.vllm_names().items():
        used = [what for what, names in (("rules", rules), ("console", console)) if name in names]
        assert entry.get("used_by", []) == used, name


@pytest.mark.parametrize("where", ["rules", "console"])
def test_the_rules_and_the_console_query_only_metrics_that_exist(where: str) -> None:
    exprs = promql.rule_exprs() if where == "rules" else promql.console_exprs()
    known: set[str] = set(promql.vllm_names()) | promql.recorded()
    known |= promql.SPARK_EXPORTER | promql.NODE_EXPORTER | promql.HAPROXY | promql.PROMETHEUS
    unknown = sorted(_queried(exprs) - known)
    assert not unknown, f"{where} query metrics nothing serves: {unknown}"


def test_the_metric_name_reader_reads_names_only() -> None:
    expr: Any = (
        'sum by (pair) (rate(vllm:generation_tokens_total{job="vllm", le="+Inf"}[2m])) > 1e10'
        " and on (pair, node) spark_rail_mtu_bytes != bool time() - up offset 5m"
    )
    assert promql.metric_names(expr) == {
        "vllm:generation_tokens_total",
        "spark_rail_mtu_bytes",
        "up",
    }
