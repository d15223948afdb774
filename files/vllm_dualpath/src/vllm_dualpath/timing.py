"""GPU timing for the calibration and the benchmarks: medians of CUDA-graph replays.

Graphs keep launch overhead out of small-M numbers; rotating weight sets keep L2-sized weights
from being timed from the cache; variants replayed in turns share clock and temperature drift.
In a fixed order each variant always follows the same one, which leaves it that one's wake
(dirty L2 lines to write back, a clock the power limit has lowered); shuffled, every round
replays the variants in a fresh order.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence

import torch

MIN_REPLAY_S = 300e-6  # a replay: whole passes over every set, at least this long
DEFAULT_BUDGET_S = 0.12
MIN_REPLAYS = 7
MAX_REPLAYS = 200

Calls = Sequence[Callable[[], object]]
ORDERS = ("fixed", "shuffled")


def _elapsed_s(start: torch.cuda.Event, end: torch.cuda.Event) -> float:
    return float(start.elapsed_time(end)) / 1e3


def time_eager_s(calls: Calls) -> float:
    """One eager pass over the calls, seconds per call (a rough estimate)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for call in calls:
        call()
    end.record()
    end.synchronize()
    return _elapsed_s(start, end) / len(calls)


def _capture(calls: Calls) -> tuple[torch.cuda.CUDAGraph, int, float]:
    """Warm up, then capture enough passes over `calls`; (graph, calls per replay, est. s/call)."""
    # Warm up on a side stream: Triton compiles, cuBLAS picks its algorithms and the caching
    # allocator settles before capture.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for call in calls:
            call()
        estimate = time_eager_s(calls)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    passes = max(1, math.ceil(MIN_REPLAY_S / (max(estimate, 1e-7) * len(calls))))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(passes):
            for call in calls:
                call()
    graph.replay()
    torch.cuda.synchronize()
    return graph, passes * len(calls), estimate


def replay_order(
    names: Sequence[str], rounds: int, order: str = "fixed", seed: int = 0
) -> list[list[str]]:
    """The variants' replays, round by round: each variant once per round, in the given order
    every round ('fixed') or in a fresh seeded permutation per round ('shuffled')."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    if order == "fixed":
        return [list(names) for _ in range(rounds)]
    shuffle = random.Random(seed)
    return [shuffle.sample(list(names), len(names)) for _ in range(rounds)]


def median_call_us_side_by_side(
    variants: Mapping[str, Calls],
    budget_s: float = DEFAULT_BUDGET_S,
    order: str = "fixed",
    seed: int = 0,
    after_replay: Callable[[str], None] | None = None,
) -> dict[str, float]:
    """Median microseconds per call of each variant, replayed in turns (``replay_order``).
    With ``after_replay``, each replay is waited for and then reported by name (to read the
    clock it left, say): that puts a host round trip between replays."""
    if not variants or any(not calls for calls in variants.values()):
        raise ValueError("nothing to time")
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    captured = {name: _capture(calls) for name, calls in variants.items()}
    round_s = sum(max(est * count, 1e-6) for _, count, est in captured.values())
    rounds = min(MAX_REPLAYS, max(MIN_REPLAYS, int(budget_s * len(variants) / round_s)))
    events = {
        name: [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(rounds)
        ]
        for name in variants
    }
    for index, names in enumerate(replay_order(list(captured), rounds, order, seed)):
        for name in names:
            start, end = events[name][index]
            start.record()
            captured[name][0].replay()
            end.record()
            if after_replay is not None:
                end.synchronize()
                after_replay(name)
    torch.cuda.synchronize()
    result = {}
    for name, (_, count, _) in captured.items():
        median_s = statistics.median(_elapsed_s(s, e) for s, e in events[name])
        result[name] = median_s / count * 1e6
    del captured
    return result
