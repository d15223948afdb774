"""The calibration's search: where unpack + cuBLAS beats Marlin, over every M (no GPU needed)."""

from __future__ import annotations

import itertools
import math

import pytest

from vllm_dualpath import crossover
from vllm_dualpath.calibration import Ranges, in_ranges

MAX_M = 8192
FIRST_M = 21


def marlin_us(m: int) -> float:
    """Marlin's shape as measured on an H100: steps at each 64-row tile, a dip on its edges."""
    tiles = math.ceil(m / 64)
    return 40.0 + 0.45 * 64 * tiles - (18.0 if m % 64 == 0 else 0.0)


def unpack_us(m: int, fixed: float = 110.0) -> float:
    """The unpack costs the same at any M; cuBLAS then grows smoothly with M."""
    return fixed + 0.25 * m


def every_m() -> list[int]:
    return [*range(FIRST_M, 1100), *range(1100, MAX_M + 200, 7)]


def timings(fixed: float) -> list[tuple[int, float, float]]:
    return [(m, marlin_us(m), unpack_us(m, fixed)) for m in every_m()]


def worst_miss(ranges: Ranges, timings: list[tuple[int, float, float]]) -> tuple[int, float]:
    """The M, and the ratio to the faster path, where the table's choice loses most: 1.0 when it
    always picked the faster one."""
    worst = (0, 1.0)
    for m, marlin, unpack in timings:
        ratio = (unpack if in_ranges(ranges, m) else marlin) / min(marlin, unpack)
        if ratio > worst[1]:
            worst = (m, ratio)
    return worst


def calibrated(fixed: float) -> tuple[Ranges, list[int]]:
    measured: list[int] = []

    def measure(m: int) -> tuple[float, float]:
        measured.append(m)
        return marlin_us(m), unpack_us(m, fixed)

    generic, tiles = crossover.search(FIRST_M, MAX_M, measure)
    return crossover.unpack_ranges(generic, FIRST_M, tiles), measured


def test_the_coarse_grid_spans_the_range_on_generic_m_about_a_quarter_apart():
    grid = crossover.coarse_grid(FIRST_M, MAX_M)
    assert grid[0] == 24 and MAX_M - 1.25 * MAX_M / 1.25 <= grid[-1] <= MAX_M
    assert all(m % 16 == 8 for m in grid)
    assert all(b > a and b <= 1.25 * a + 16 for a, b in itertools.pairwise(grid))
    assert len(grid) < 30


@pytest.mark.parametrize("fixed", [30.0, 110.0, 160.0, 400.0, 900.0])
def test_the_table_picks_within_three_percent_of_the_faster_path_at_every_m(fixed):
    ranges, measured = calibrated(fixed)
    m, ratio = worst_miss(ranges, timings(fixed))
    assert ratio <= 1.03, (m, ratio, ranges)
    assert len(measured) == len(set(measured)) < 80  # a few minutes per node, not hours


def test_tile_edges_where_marlin_dips_get_their_own_decision():
    ranges, _ = calibrated(110.0)
    marlin_dip = [m for m in range(64, 1024, 64) if marlin_us(m) < unpack_us(m) < marlin_us(m - 8)]
    assert marlin_dip, "the curves must give the test a dip to find"
    assert all(not in_ranges(ranges, m) for m in marlin_dip)
    assert all(in_ranges(ranges, m - 8) for m in marlin_dip)


def test_deciding_by_generic_m_alone_would_miss_the_dips():
    generic, _ = crossover.search(FIRST_M, MAX_M, lambda m: (marlin_us(m), unpack_us(m)))
    without_tiles = crossover.unpack_ranges(generic, FIRST_M)
    assert worst_miss(without_tiles, timings(110.0))[1] > 1.03


def test_marlin_everywhere_and_unpack_everywhere():
    never = crossover.search(FIRST_M, 512, lambda m: (1.0, 2.0))
    assert crossover.unpack_ranges(*never[:1], FIRST_M, never[1]) == ()
    always = crossover.search(FIRST_M, 512, lambda m: (2.0, 1.0))
    assert crossover.unpack_ranges(always[0], FIRST_M, always[1]) == ((FIRST_M, None),)
    assert crossover.describe(()) == "Marlin at every M"
    assert crossover.describe(((64, 100), (300, None))) == "unpack at M 64-100, 300 and up"


def test_each_generic_point_decides_its_block_and_each_tile_only_itself():
    generic = {24: False, 56: True, 120: False, 248: True}
    assert crossover.unpack_ranges(generic, 21) == ((33, 64), (129, None))
    assert crossover.unpack_ranges(generic, 21, {128: True, 192: False}) == (
        (33, 64),
        (128, 191),
        (193, None),
    )


def test_a_bad_range_is_refused():
    with pytest.raises(ValueError, match="first <= last"):
        crossover.coarse_grid(100, 50)
