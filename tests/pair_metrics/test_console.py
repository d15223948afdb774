"""pair.html served by the packaged Prometheus, as pair_metrics installs it: the server runs the
configuration the role renders for a made-up pair whose exporters and vLLM are doubles on this
machine, with the role's rules, and the package's console library. The list of pairs and the
pair's page render; every query of the page is valid PromQL and finds series (so it names only
metrics that exist: the doubles serve exactly the names of files/vllm_metric_names.yml, of the
Spark exporter and of node_exporter)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.pair_metrics import promql
from tests.pair_metrics.scraped_pairs import PairDoubles, get, query, running_prometheus


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a Prometheus that has scraped the doubles and evaluated the rules."""
    pair = PairDoubles("pair_one", ("spark-01", "spark-02"))
    try:
        with running_prometheus(tmp_path_factory.mktemp("prometheus"), [pair]) as base:
            yield base
    finally:
        pair.close()


def test_the_list_of_pairs_links_each_pair(server: str) -> None:
    status, page = get(f"{server}/consoles/pair.html")
    assert status == 200, page
    assert 'href="pair.html?pair=pair_one"' in page
    assert "No pair is scraped yet" not in page


def test_the_pair_page_renders_every_graph_and_the_pair_at_a_glance(server: str) -> None:
    status, page = get(f"{server}/consoles/pair.html?pair=pair_one")
    assert status == 200, page
    for graph in ("tokens", "latency", "requests", "kv_cache", "memory", "gpu_power"):
        assert f'<div id="{graph}"></div>' in page
    for graph in ("gpu_temperature", "gpu_clock", "rail"):
        assert f'<div id="{graph}"></div>' in page
    assert page.count("new PromConsole.Graph(") == 9
    assert "prom_console.js" in page  # prom.lib's head
    for shown in ("spark-01 free memory", "spark-02 free memory", "spark-01 NCCL", "r1"):
        assert shown in page, shown


def test_every_query_of_the_page_finds_series(server: str) -> None:
    _, page = get(f"{server}/consoles/pair.html?pair=pair_one")
    exprs = promql.console_exprs(page)
    assert len(exprs) >= 20, exprs
    empty = []
    for expr in exprs:
        answer = query(server, expr)
        assert answer["status"] == "success", (expr, answer)
        if not answer["data"]["result"]:
            empty.append(expr)
    assert not empty, f"queries that find nothing: {empty}"
