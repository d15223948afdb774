"""One Prometheus for the telemetry scripts' tests, scraping three made-up pairs: pair_one
serves everything, pair_two's vLLM leaves out its KV-cache gauge, pair_three has no vLLM."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.pair_metrics.scraped_pairs import PairDoubles, running_prometheus

KV_CACHE = "vllm:kv_cache_usage_perc"
# The console's graphs span an hour over about 1100 pixels: their last point can lie 3.3 s before
# the page's now, and a rate there needs two samples before it.
SCRAPES = 6


@pytest.fixture(scope="package")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of the packaged Prometheus once it scraped every target SCRAPES times."""
    pairs = [
        PairDoubles("pair_one", ("spark-01", "spark-02")),
        PairDoubles("pair_two", ("spark-03", "spark-04"), without={"vllm": [KV_CACHE]}),
        PairDoubles("pair_three", ("spark-05", "spark-06"), missing=["vllm"]),
    ]
    try:
        directory = tmp_path_factory.mktemp("prometheus")
        with running_prometheus(directory, pairs, scrapes=SCRAPES) as base:
            yield base
    finally:
        for pair in pairs:
            pair.close()
