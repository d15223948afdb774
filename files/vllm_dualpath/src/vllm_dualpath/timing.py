"""GPU timing for the benchmark and the calibration: CUDA-graph replays, medians, rotating inputs.

Every measurement captures the calls in a CUDA graph, so launch overhead (CPU time) stays out of
small-M numbers, and rotates over several weight sets, so a weight small enough for the L2 cache
is not timed from the cache. A replay holds at least one pass over all sets and enough passes to
run for `MIN_REPLAY_S`; the result is the median replay time divided by the calls in it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence

import torch

MIN_REPLAY_S = 300e-6
DEFAULT_BUDGET_S = 0.12
MIN_REPLAYS = 7
MAX_REPLAYS = 200


def _elapsed_s(start: torch.cuda.Event, end: torch.cuda.Event) -> float:
    return start.elapsed_time(end) / 1e3


def time_eager_s(calls: Sequence[Callable[[], object]]) -> float:
    """One eager pass over the calls, seconds per call (a rough estimate)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for call in calls:
        call()
    end.record()
    end.synchronize()
    return _elapsed_s(start, end) / len(calls)


def median_call_us(
    calls: Sequence[Callable[[], object]], budget_s: float = DEFAULT_BUDGET_S
) -> float:
    """Median microseconds per call of `calls` (one per weight set), timed as graph replays."""
    if not calls:
        raise ValueError("nothing to time")
    # Warm up on a side stream: Triton compiles, cuBLAS picks its algorithms, the caching
    # allocator settles, all before capture.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for call in calls:
            call()
        estimate = time_eager_s(calls)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    passes = max(1, math.ceil(MIN_REPLAY_S / (estimate * len(calls))))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(passes):
            for call in calls:
                call()
    graph.replay()
    torch.cuda.synchronize()

    calls_per_replay = passes * len(calls)
    replay_s = max(estimate * calls_per_replay, 1e-6)
    replays = min(MAX_REPLAYS, max(MIN_REPLAYS, int(budget_s / replay_s)))
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(replays)
    ]
    for start, end in events:
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    median_s = statistics.median(_elapsed_s(start, end) for start, end in events)
    del graph
    return median_s / calls_per_replay * 1e6


def copy_bandwidth_gbps(nbytes: int = 2 << 30, budget_s: float = 0.5) -> float:
    """Device-to-device copy bandwidth, counting bytes read plus bytes written."""
    count = nbytes // 2
    sources = [torch.empty(count, dtype=torch.bfloat16, device="cuda").normal_() for _ in range(2)]
    target = torch.empty_like(sources[0])
    calls = [lambda s=s: target.copy_(s) for s in sources]
    median_us = median_call_us(calls, budget_s)
    return 2 * count * 2 / (median_us * 1e-6) / 1e9
