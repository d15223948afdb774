"""Where unpack + cuBLAS beats Marlin for one shape, over every M the scheduler can produce.

Marlin's time rises in steps of its 64-row tiles and dips at exact multiples of 64 (measured on an
H100: 69 us at M = 256 against 88 us at M = 248 for 7168x5120), so the paths can cross several
times where they are close, and an M on a multiple of 64 says little about its neighbours. The
search therefore measures two kinds of M:

- generic M, 8 past a multiple of 16: a coarse grid about 25% apart, then every 16 tokens (3%
  apart above M = 1024) in every interval whose ends are within a Marlin step (64 / M, plus a
  margin) of a tie or disagree. Each decides its own 16-token block (Marlin's steps fall on block
  edges) and the blocks below it down to the block of the generic point before it (the lowest
  down to ``first``; the highest, every larger M);
- tile M, the multiples of 64 inside those close intervals below M = 1024: each decides itself.

Needs no GPU: the timing is the caller's ``measure``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

from vllm_dualpath.calibration import Ranges

GRID_STEP = 1.25
TILE_M = 16
MARLIN_STEP_M = 64
CONTESTED_MARGIN = 0.05
FINE_RELATIVE_FROM_M = 1024
FINE_RELATIVE = 0.03

# (marlin us, unpack us) for a call of M tokens.
Measure = Callable[[int], tuple[float, float]]


def generic_at_or_above(m: int) -> int:
    """The smallest M >= m that lies 8 past a multiple of 16 (never on a Marlin tile edge)."""
    return math.ceil((m - TILE_M // 2) / TILE_M) * TILE_M + TILE_M // 2


def coarse_grid(first: int, last: int) -> list[int]:
    """Generic M from ``first`` up to ``last``, each about GRID_STEP times the one before."""
    if not 0 < first <= last:
        raise ValueError(f"an M range needs 0 < first <= last, got {first}..{last}")
    grid = [min(generic_at_or_above(first), last)]
    while True:
        following = generic_at_or_above(math.ceil(grid[-1] * GRID_STEP))
        if following > last:
            return grid
        grid.append(following)


def _fine_points(low: int, high: int) -> tuple[list[int], list[int]]:
    """Generic and tile M strictly between two coarse points."""
    generic = []
    m = low
    while True:
        step = TILE_M if m < FINE_RELATIVE_FROM_M else math.ceil(m * FINE_RELATIVE)
        m = generic_at_or_above(m + step)
        if m >= high:
            break
        generic.append(m)
    first_tile = math.ceil((low + 1) / MARLIN_STEP_M) * MARLIN_STEP_M
    tiles = list(range(first_tile, min(high, FINE_RELATIVE_FROM_M + 1), MARLIN_STEP_M))
    return generic, tiles


def search(first: int, last: int, measure: Measure) -> tuple[dict[int, bool], dict[int, bool]]:
    """Whether unpack wins at each measured generic M and at each measured tile M."""
    times = {m: measure(m) for m in coarse_grid(first, last)}

    def margin(m: int) -> float:
        return max(times[m]) / min(times[m]) - 1

    def unpack_wins(timed: tuple[float, float]) -> bool:
        return timed[1] < timed[0]

    tiles: dict[int, tuple[float, float]] = {}
    for low, high in itertools.pairwise(sorted(times)):
        close = min(margin(low), margin(high)) < CONTESTED_MARGIN + MARLIN_STEP_M / low
        if close or unpack_wins(times[low]) != unpack_wins(times[high]):
            generic, tile_points = _fine_points(low, high)
            for m in generic:
                times[m] = measure(m)
            for m in tile_points:
                tiles[m] = measure(m)
    return (
        {m: unpack_wins(timed) for m, timed in sorted(times.items())},
        {m: unpack_wins(timed) for m, timed in sorted(tiles.items())},
    )


def _as_ranges(unpack_ms: list[tuple[int, int | None]]) -> Ranges:
    """Merge sorted, disjoint [low, high] spans that touch."""
    merged: list[tuple[int, int | None]] = []
    for low, high in unpack_ms:
        if merged and merged[-1][1] is not None and merged[-1][1] + 1 == low:
            merged[-1] = (merged[-1][0], high)
        else:
            merged.append((low, high))
    return tuple(merged)


def unpack_ranges(
    generic: dict[int, bool], first: int, tiles: dict[int, bool] | None = None
) -> Ranges:
    """The M ranges unpack serves, from the generic decisions with each tile M's own on top."""
    points = sorted(generic)
    spans: list[tuple[int, int | None, bool]] = []
    half = TILE_M // 2  # a generic M's 16-token block ends half a block above it
    for index, m in enumerate(points):
        low = first if index == 0 else points[index - 1] + half + 1
        high = None if index == len(points) - 1 else m + half
        spans.append((low, high, generic[m]))
    decided: list[tuple[int, int | None, bool]] = []
    exceptions = sorted((tiles or {}).items())
    for low, high, wins in spans:
        start = low
        for tile, tile_wins in exceptions:
            if tile < low or (high is not None and tile > high) or tile_wins == wins:
                continue
            if start <= tile - 1:
                decided.append((start, tile - 1, wins))
            decided.append((tile, tile, tile_wins))
            start = tile + 1
        if high is None or start <= high:
            decided.append((start, high, wins))
    return _as_ranges([(low, high) for low, high, wins in decided if wins])


def describe(ranges: Ranges) -> str:
    if not ranges:
        return "Marlin at every M"
    parts = [f"{low}-{high}" if high is not None else f"{low} and up" for low, high in ranges]
    return "unpack at M " + ", ".join(parts)
