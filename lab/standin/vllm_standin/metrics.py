"""vLLM's Prometheus metrics as rank 0's API server exposes them at /metrics (vLLM 0.34.0).

The families the lab's dashboards and benchmark read, with the names, types, help texts, label
names (`model_name`, `engine`, plus `finished_reason`) and default buckets that
vllm/v1/metrics/loggers.py (PrometheusStatLogger) and vllm/v1/metrics/buckets.py declare;
tests/service/test_standin_metrics.py holds them to the pinned vLLM's source. Their values come
from the requests the stand-in serves (api.py), in vLLM's terms: a request waits for one of
--max-num-seqs sequence slots, runs, has its first token once the model's forward has run on
both ranks, and finishes after the simulated generation time. The KV-cache gauge is the tokens
the running requests hold (prompt and generated) over a nominal capacity
(STANDIN_KV_CACHE_TOKENS): the stand-in has no cache to measure.

The text is Prometheus' format 0.0.4 as prometheus_client's generate_latest writes it (which
vLLM serves): a counter as <name>_total with a <name>_created gauge, a histogram as _bucket,
_count and _sum with a _created gauge, labels sorted by name.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
LABELS: Final = ("model_name", "engine")
# vllm/v1/engine/__init__.py: FINISH_REASON_STRINGS, every one exposed from the start.
FINISHED_REASONS: Final = ("stop", "length", "abort", "error", "repetition")
# vLLM's --max-num-seqs default for the API server on a GPU that is neither H100/H200-class nor
# MI300 (vllm/engine/arg_utils.py, _set_default_max_num_seqs_and_batched_tokens_args): a GB10.
DEFAULT_MAX_NUM_SEQS: Final = 256
# The request-token histograms' buckets run to max_model_len; without one the stand-in has no
# model config to read it from.
DEFAULT_MAX_MODEL_LEN: Final = 8192

# vllm/v1/metrics/buckets.py, the default of each family.
TIME_TO_FIRST_TOKEN_BUCKETS: Final = (
    *(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75),
    *(1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0),
)
INTER_TOKEN_LATENCY_BUCKETS: Final = (
    *(0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75),
    *(1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0),
)
REQUEST_LATENCY_BUCKETS: Final = (
    *(0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0),
    *(120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0),
)


def request_tokens_buckets(max_model_len: int) -> tuple[float, ...]:
    """buckets.py's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, ... up to max_model_len."""
    buckets: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_model_len:
                return tuple(buckets)
            buckets.append(value)
        exponent += 1


@dataclass(frozen=True)
class Family:
    """One metric as PrometheusStatLogger declares it (a counter's name without _total)."""

    name: str
    kind: str  # "gauge", "counter" or "histogram"
    help: str
    extra_label: str = ""  # a label beyond model_name and engine
    buckets: str = ""  # a histogram's bucket family in buckets.py


FAMILIES: Final = (
    Family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches."),
    Family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed."),
    Family("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage."),
    Family("vllm:prompt_tokens", "counter", "Number of prefill tokens processed."),
    Family("vllm:generation_tokens", "counter", "Number of generation tokens processed."),
    Family(
        "vllm:request_success",
        "counter",
        "Count of successfully processed requests.",
        extra_label="finished_reason",
    ),
    Family(
        "vllm:request_prompt_tokens",
        "histogram",
        "Number of prefill tokens processed.",
        buckets="request_tokens",
    ),
    Family(
        "vllm:request_generation_tokens",
        "histogram",
        "Number of generation tokens processed.",
        buckets="request_tokens",
    ),
    Family(
        "vllm:time_to_first_token_seconds",
        "histogram",
        "Histogram of time to first token in seconds.",
        buckets="time_to_first_token",
    ),
    Family(
        "vllm:inter_token_latency_seconds",
        "histogram",
        "Histogram of inter-token latency in seconds.",
        buckets="inter_token_latency",
    ),
    Family(
        "vllm:e2e_request_latency_seconds",
        "histogram",
        "Histogram of e2e request latency in seconds.",
        buckets="request_latency",
    ),
)


def exposed_names() -> list[str]:
    """The sample names a scrape shows (counters with _total, histograms with _bucket etc.)."""
    names: list[str] = []
    for family in FAMILIES:
        if family.kind == "counter":
            names.append(family.name + "_total")
        elif family.kind == "histogram":
            names += [family.name + suffix for suffix in ("_bucket", "_count", "_sum")]
        else:
            names.append(family.name)
    return names


class Histogram:
    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last: +Inf
        self.total = 0.0

    def observe(self, value: float) -> None:
        index = next((i for i, b in enumerate(self.bounds) if value <= b), len(self.bounds))
        self.counts[index] += 1
        self.total += value


class Metrics:
    """The engine's figures for one served model; every method is safe across handler threads."""

    def __init__(
        self,
        model_name: str,
        *,
        max_model_len: int | None,
        kv_cache_tokens: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.labels = {"model_name": model_name, "engine": "0"}
        self.kv_cache_tokens = kv_cache_tokens
        self.clock = clock
        self.lock = threading.Lock()
        self.created = time.time()
        self.running = 0
        self.waiting = 0
        self.kv_tokens = 0
        self.counters: dict[tuple[str, str], float] = {}
        for family in FAMILIES:
            if family.kind == "counter":
                values = FINISHED_REASONS if family.extra_label else ("",)
                self.counters.update({(family.name, value): 0.0 for value in values})
        # --max-model-len auto (-1) or none: the model config's, which the stand-in has not.
        length = max_model_len if max_model_len and max_model_len > 0 else DEFAULT_MAX_MODEL_LEN
        token_bounds = request_tokens_buckets(length)
        bounds = {
            "request_tokens": token_bounds,
            "time_to_first_token": TIME_TO_FIRST_TOKEN_BUCKETS,
            "inter_token_latency": INTER_TOKEN_LATENCY_BUCKETS,
            "request_latency": REQUEST_LATENCY_BUCKETS,
        }
        self.histograms = {
            family.name: Histogram(bounds[family.buckets])
            for family in FAMILIES
            if family.kind == "histogram"
        }

    def arrive(self, prompt_tokens: int) -> Request:
        """A request the engine accepted: waiting until it gets a sequence slot."""
        with self.lock:
            self.waiting += 1
        return Request(self, prompt_tokens, self.clock())

    def aborted_at_admission(self, prompt_tokens: int) -> None:
        """A request the draining engine finishes at once as aborted (no token computed)."""
        with self.lock:
            self.counters["vllm:request_success", "abort"] += 1
            self.histograms["vllm:e2e_request_latency_seconds"].observe(0.0)
            self.histograms["vllm:request_prompt_tokens"].observe(prompt_tokens)
            self.histograms["vllm:request_generation_tokens"].observe(0)

    def exposition(self) -> str:
        with self.lock:
            return "".join(self._family_text(family) for family in FAMILIES)

    def _family_text(self, family: Family) -> str:
        if family.kind == "gauge":
            value = {
                "vllm:num_requests_running": self.running,
                "vllm:num_requests_waiting": self.waiting,
                "vllm:kv_cache_usage_perc": min(1.0, self.kv_tokens / self.kv_cache_tokens),
            }[family.name]
            return _header(family.name, family.help, "gauge") + _sample(
                family.name, self.labels, value
            )
        if family.kind == "counter":
            values = FINISHED_REASONS if family.extra_label else ("",)
            children = [
                {**self.labels, family.extra_label: value} if family.extra_label else self.labels
                for value in values
            ]
            lines = [_header(family.name + "_total", family.help, "counter")]
            for value, labels in zip(values, children, strict=True):
                lines.append(
                    _sample(family.name + "_total", labels, self.counters[family.name, value])
                )
            lines.append(_header(family.name + "_created", family.help, "gauge"))
            lines += [
                _sample(family.name + "_created", labels, self.created) for labels in children
            ]
            return "".join(lines)
        histogram = self.histograms[family.name]
        lines = [_header(family.name, family.help, "histogram")]
        cumulative = 0
        for bound, count in zip((*histogram.bounds, None), histogram.counts, strict=True):
            cumulative += count
            le = "+Inf" if bound is None else _number(bound)
            lines.append(_sample(family.name + "_bucket", {**self.labels, "le": le}, cumulative))
        lines.append(_sample(family.name + "_count", self.labels, cumulative))
        lines.append(_sample(family.name + "_sum", self.labels, histogram.total))
        lines.append(_header(family.name + "_created", family.help, "gauge"))
        lines.append(_sample(family.name + "_created", self.labels, self.created))
        return "".join(lines)


class Request:
    """One request's path through the engine: waiting, running, first token, finished."""

    def __init__(self, metrics: Metrics, prompt_tokens: int, arrival: float) -> None:
        self.metrics = metrics
        self.prompt_tokens = prompt_tokens
        self.arrival = arrival
        self.state = "waiting"
        self.held = 0  # KV-cache tokens
        self.first_token_at = 0.0

    def run(self) -> None:
        with self.metrics.lock:
            self.metrics.waiting -= 1
            self.metrics.running += 1
            self.state = "running"

    def first_token(self) -> None:
        """The prefill is done and one token generated (vLLM counts both at that step)."""
        metrics = self.metrics
        self.first_token_at = metrics.clock()
        with metrics.lock:
            metrics.histograms["vllm:time_to_first_token_seconds"].observe(
                self.first_token_at - self.arrival
            )
            metrics.counters["vllm:prompt_tokens", ""] += self.prompt_tokens
            metrics.counters["vllm:generation_tokens", ""] += 1
            self._hold(self.prompt_tokens + 1)

    def finish(self, generation_tokens: int, reason: str) -> None:
        """The last token came: one inter-token latency per token after the first."""
        metrics = self.metrics
        now = metrics.clock()
        generated = max(generation_tokens, 1)
        with metrics.lock:
            if generated > 1:
                gap = (now - self.first_token_at) / (generated - 1)
                for _ in range(generated - 1):
                    metrics.histograms["vllm:inter_token_latency_seconds"].observe(gap)
                metrics.counters["vllm:generation_tokens", ""] += generated - 1
            metrics.counters["vllm:request_success", reason] += 1
            metrics.histograms["vllm:e2e_request_latency_seconds"].observe(now - self.arrival)
            metrics.histograms["vllm:request_prompt_tokens"].observe(self.prompt_tokens)
            metrics.histograms["vllm:request_generation_tokens"].observe(generated)
            self._leave()

    def close(self) -> None:
        """Leave the engine unfinished (lost with it, or refused): no count, no latency."""
        with self.metrics.lock:
            self._leave()

    def _hold(self, tokens: int) -> None:
        self.metrics.kv_tokens += tokens - self.held
        self.held = tokens

    def _leave(self) -> None:
        if self.state == "waiting":
            self.metrics.waiting -= 1
        elif self.state == "running":
            self.metrics.running -= 1
        self._hold(0)
        self.state = "done"


def _header(name: str, help_text: str, kind: str) -> str:
    return f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n"


def _sample(name: str, labels: dict[str, str], value: float) -> str:
    escaped = (
        v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"") for v in labels.values()
    )
    text = ",".join(f'{k}="{v}"' for k, v in sorted(zip(labels, escaped, strict=True)))
    return f"{name}{{{text}}} {_number(value)}\n"


def _number(value: float) -> str:
    """prometheus_client's floatToGoString: Go's spelling of a float (exponent past 1e6)."""
    value = float(value)
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    if value != value:
        return "NaN"
    text = repr(value)
    dot = text.find(".")
    if value > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text
