"""The power-floor probe without a GPU: the floor arithmetic, and each committed result against
its doc (results/power-floor-{h200,h100}.md). The measurement itself runs only on a CUDA GPU
with NVML; the command line: test_tool_commands.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import power_floor
import pytest
import torch
from studies import assert_doc_has_every_path, committed_result, probe_command

RESULTS = (committed_result("power_floor"), committed_result("power_floor", "h100"))


def paths(bf16_w: float, unpack_us: float, unpack_w: float) -> dict[str, dict[str, float]]:
    """BF16 passes of 1 ms at ``bf16_w``; the unpacks alone ``unpack_us`` at ``unpack_w``."""
    return {
        "bf16": {"us_per_pass": 1000.0, "mean_power_w": bf16_w, "j_per_pass": bf16_w * 1e-3},
        "unpack_only": {
            "us_per_pass": unpack_us,
            "mean_power_w": unpack_w,
            "j_per_pass": unpack_w * unpack_us * 1e-6,
        },
    }


def test_unpacks_that_spend_nothing_above_idle_leave_no_floor() -> None:
    floors = power_floor.floors(paths(700.0, 300.0, 100.0), limit_w=700.0, idle_w=100.0)
    assert floors == pytest.approx({"fixed_clock": 1.0, "scaled_clock": 1.0})


def test_the_floors_of_a_worked_example() -> None:
    # BF16: 600 W above idle for 1 ms. Unpacks: 0.3 ms at 500 W above idle, 0.15 J.
    floors = power_floor.floors(paths(700.0, 300.0, 600.0), limit_w=700.0, idle_w=100.0)
    assert floors["fixed_clock"] == pytest.approx((0.6 + 0.15) / 0.6)
    # 600 x**3 - 150 x**2 = 600: the GEMMs' clock lowered to leave the unpacks their power
    roots = np.roots([600.0, -150.0, 0.0, -600.0])
    real = max(r.real for r in roots if abs(r.imag) < 1e-9)
    assert floors["scaled_clock"] == pytest.approx(real, abs=1e-9)
    assert 1.0 < floors["scaled_clock"] < floors["fixed_clock"]


def test_a_bf16_pass_below_the_limit_lowers_the_floor() -> None:
    at_limit = power_floor.floors(paths(700.0, 300.0, 600.0), limit_w=700.0, idle_w=100.0)
    below = power_floor.floors(paths(550.0, 300.0, 600.0), limit_w=700.0, idle_w=100.0)
    assert below["fixed_clock"] < at_limit["fixed_clock"]
    assert below["scaled_clock"] < at_limit["scaled_clock"]


@pytest.mark.parametrize("result_path", RESULTS, ids=lambda path: path.stem)
def test_the_committed_result_is_what_its_doc_says(result_path: Path) -> None:
    result = json.loads(result_path.read_text())
    doc = result_path.with_suffix(".md").read_text()
    lines = doc.splitlines()
    assert probe_command(result)[0] == "power_floor.py"
    limit, idle = result["power_limit_w"], result["idle_power_w"]
    for row in result["rows"]:
        floors = power_floor.floors(row["paths"], limit, idle)
        assert row["floor"] == pytest.approx(floors["fixed_clock"])
        m = row["m"]
        floor_row = re.compile(rf"\| {m} \| 1\.\d{{3}} \|")
        line = next(line for line in lines if floor_row.match(line))
        assert f"| {floors['fixed_clock']:.3f} | {floors['scaled_clock']:.3f} |" in line, line
        bf16 = row["paths"]["bf16"]
        # the doc's premise: BF16 alone holds the GPU at its power limit
        assert bf16["mean_power_w"] > 0.97 * limit and bf16["power_cap_share"] > 0.9, m
    assert_doc_has_every_path(result_path)


def test_l2_chunk_slices_are_marlin_weights_of_their_channels() -> None:
    from vllm_dualpath import layout

    g = torch.Generator().manual_seed(3)
    n, k = 768, 256
    codes = torch.randint(0, 256, (n, k), generator=g, dtype=torch.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0  # no NaN codes
    scales = torch.rand(n // 128, k // 128, generator=g) + 0.5
    packed, stored, _ = layout.prepare_reference(
        codes.view(torch.float8_e4m3fn), scales, block=(128, 128)
    )
    whole = layout.dequantize_reference(packed, stored, n, k)
    channels = power_floor.chunk_channels(k, 256 * k * 2 / 2**20)
    assert channels == 256
    chunks = power_floor.split_weight(packed, stored, n, channels)
    assert [(first, end) for first, end, _, _ in chunks] == [(0, 256), (256, 512), (512, 768)]
    for first, end, words, chunk_scales in chunks:
        sliced = layout.dequantize_reference(words, chunk_scales, end - first, k)
        assert torch.equal(sliced.view(torch.int16), whole[first:end].view(torch.int16)), first


def test_l2_chunks_need_whole_tiles() -> None:
    words = torch.zeros(16, 4 * 320, dtype=torch.int32)
    with pytest.raises(ValueError, match="whole 256-channel tiles"):
        power_floor.split_weight(words, torch.zeros(2, 320), 320, 256)
    assert power_floor.chunk_channels(5120, 16) == 1536  # 16 MiB of BF16 rows of 5120, whole tiles
    assert power_floor.chunk_channels(5120, 0.1) == 256  # never less than one tile
