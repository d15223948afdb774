"""The stand-in's /metrics is vLLM's: its names, types, labels and buckets, fed by what it serves.

Declarations and the API key's guarded paths are read from the pinned vLLM's source
(tests/service/vllm_metrics.py), so a metric vLLM renames or retypes fails here; every scrape is
parsed by the prometheus_client vLLM runs with.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from vllm_standin import api, metrics

from tests.service import vllm_metrics
from tests.service.standin_pair import Pair


@pytest.fixture(scope="module")
def vllm() -> Path:
    return vllm_metrics.source()


def scrape(pair: Pair, key: str | None = None) -> dict[str, dict[str, Any]]:
    """GET /metrics (no API key unless given), parsed: family name -> family."""
    request = urllib.request.Request(pair.url("/metrics"))
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    with urllib.request.urlopen(request, timeout=20) as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == metrics.CONTENT_TYPE
        text = response.read().decode()
    return {family["name"]: family for family in vllm_metrics.parse(text)}


def value(families: dict[str, dict[str, Any]], sample: str, **labels: str) -> float:
    """The one sample of that name whose labels include these."""
    (found,) = [
        s[2]
        for family in families.values()
        for s in family["samples"]
        if s[0] == sample and all(s[1].get(k) == v for k, v in labels.items())
    ]
    return float(found)


def complete(pair: Pair, prompt: str) -> int:
    body = {"model": "test-model", "prompt": prompt, "max_tokens": 4}
    return pair.call("/v1/completions", body)[0]


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    started = Pair(tmp_path, None, {"STANDIN_COMPLETION": " four five six"})
    yield started
    started.stop()


def test_every_family_is_declared_so_by_vllm(vllm: Path) -> None:
    declared = vllm_metrics.declared(vllm)
    for family in metrics.FAMILIES:
        assert family.name in declared, f"vLLM no longer declares {family.name}"
        real = declared[family.name]
        labels = (*metrics.LABELS, family.extra_label) if family.extra_label else metrics.LABELS
        assert (family.kind, family.help, labels) == (real.kind, real.help, real.labels)
        assert family.buckets == real.buckets, family.name


def test_buckets_are_vllms_defaults(vllm: Path) -> None:
    state = metrics.Metrics("m", max_model_len=524288, kv_cache_tokens=100)
    for family in metrics.FAMILIES:
        if family.kind == "histogram":
            real = vllm_metrics.bucket_defaults(vllm, family.buckets, 524288)
            assert list(state.histograms[family.name].bounds) == real, family.name


def test_the_api_key_guards_the_paths_vllm_guards(vllm: Path) -> None:
    assert vllm_metrics.guarded_prefix(vllm) == api.GUARDED_PREFIX


def test_counts_follow_the_requests_served(pair: Pair) -> None:
    pair.start(1)
    pair.start(0, serve_args=["--max-model-len", "1000"])
    pair.wait_ready(timeout_s=60)  # torch loads slowly on a busy machine
    before = scrape(pair)
    assert set(before) >= {f.name for f in metrics.FAMILIES}
    for family in metrics.FAMILIES:  # every sample with the served model and engine 0
        for _, labels, _ in before[family.name]["samples"]:
            assert (labels["model_name"], labels["engine"]) == ("test-model", "0"), family.name
    for reason in metrics.FINISHED_REASONS:  # every reason from the start, as vLLM
        assert value(before, "vllm:request_success_total", finished_reason=reason) == 0
    assert value(before, "vllm:prompt_tokens_total") == 0
    bounds = [s[1]["le"] for s in before["vllm:request_prompt_tokens"]["samples"] if "le" in s[1]]
    assert bounds[-3:] == ["500.0", "1000.0", "+Inf"]  # 1-2-5 up to --max-model-len

    assert complete(pair, "one two three") == 200
    assert complete(pair, "one two three four five") == 200
    assert pair.call("/v1/completions", {"model": "other", "prompt": "x"})[0] == 404
    after = scrape(pair)
    assert value(after, "vllm:prompt_tokens_total") == 8
    assert value(after, "vllm:generation_tokens_total") == 6  # " four five six" twice
    assert value(after, "vllm:request_success_total", finished_reason="length") == 2
    assert value(after, "vllm:request_success_total", finished_reason="abort") == 0
    for histogram in ("time_to_first_token_seconds", "e2e_request_latency_seconds"):
        assert value(after, f"vllm:{histogram}_count") == 2
        assert value(after, f"vllm:{histogram}_bucket", le="+Inf") == 2
    assert value(after, "vllm:inter_token_latency_seconds_count") == 4  # 2 after each first
    assert value(after, "vllm:request_prompt_tokens_sum") == 8
    assert value(after, "vllm:request_prompt_tokens_bucket", le="5.0") == 2
    assert value(after, "vllm:request_prompt_tokens_bucket", le="2.0") == 0
    assert value(after, "vllm:request_generation_tokens_sum") == 6
    for gauge in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"):
        assert value(after, f"vllm:{gauge}") == 0


def test_running_and_waiting_follow_concurrency(tmp_path: Path) -> None:
    env = {"STANDIN_COMPLETION_DELAY_S": "3", "STANDIN_KV_CACHE_TOKENS": "100"}
    pair = Pair(tmp_path, None, env)
    try:
        pair.start(1)
        pair.start(0, serve_args=["--max-num-seqs", "2"])
        pair.wait_ready(timeout_s=60)  # torch loads slowly on a busy machine
        statuses: list[int] = []
        prompts = [f"request {i} of five" for i in range(5)]  # 4 words each
        workers = [
            threading.Thread(target=lambda p=p: statuses.append(complete(pair, p))) for p in prompts
        ]
        for worker in workers:
            worker.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            busy = scrape(pair)
            if value(busy, "vllm:num_requests_waiting") == 3:
                break
            time.sleep(0.2)
        assert value(busy, "vllm:num_requests_running") == 2  # --max-num-seqs
        assert value(busy, "vllm:num_requests_waiting") == 3
        for worker in workers:
            worker.join(timeout=30)
        assert statuses == [200] * 5
        done = scrape(pair)
        assert value(done, "vllm:num_requests_running") == 0
        assert value(done, "vllm:num_requests_waiting") == 0
        assert value(done, "vllm:request_success_total", finished_reason="length") == 5
        # The last three waited a whole request (3 s) for a slot before their first token.
        assert value(done, "vllm:time_to_first_token_seconds_bucket", le="2.5") == 2
    finally:
        pair.stop()


def test_metrics_need_no_api_key_as_in_vllm(pair: Pair) -> None:
    pair.start(1)
    pair.start(0)
    pair.wait_ready(timeout_s=60)  # torch loads slowly on a busy machine
    assert scrape(pair)  # no key
    assert scrape(pair, key="wrong")
    assert pair.call("/v1/models", key="wrong")[0] == 401
    assert pair.call("/health", key="wrong")[0] == 200


def test_figures_of_one_request_land_in_vllms_buckets(vllm: Path) -> None:
    now = [0.0]
    state = metrics.Metrics("m", max_model_len=100, kv_cache_tokens=20, clock=lambda: now[0])
    request = state.arrive(prompt_tokens=9)
    request.run()
    now[0] = 0.3
    request.first_token()  # holds 9 prompt tokens and 1 generated
    families = {f["name"]: f for f in vllm_metrics.parse(state.exposition())}
    assert value(families, "vllm:kv_cache_usage_perc") == 0.5
    assert value(families, "vllm:num_requests_running") == 1
    now[0] = 1.3
    request.finish(3, "length")  # two tokens after the first: 0.5 s apart
    state.aborted_at_admission(prompt_tokens=4)
    families = {f["name"]: f for f in vllm_metrics.parse(state.exposition())}
    ttft = "vllm:time_to_first_token_seconds_bucket"
    assert value(families, ttft, le="0.25") == 0
    assert value(families, ttft, le="0.5") == 1
    itl = "vllm:inter_token_latency_seconds_bucket"
    assert value(families, itl, le="0.4") == 0
    assert value(families, itl, le="0.5") == 2
    e2e = "vllm:e2e_request_latency_seconds_bucket"
    assert value(families, e2e, le="1.0") == 1  # the abort's 0 s
    assert value(families, e2e, le="1.5") == 2
    success = "vllm:request_success_total"
    assert value(families, success, finished_reason="abort") == 1
    assert value(families, "vllm:prompt_tokens_total") == 9  # no prefill for the abort
    assert value(families, "vllm:kv_cache_usage_perc") == 0
