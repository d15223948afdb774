"""The Triton unpack is bit-exact with the reference layout + exact rounding, on the CPU."""

from __future__ import annotations

import pytest
import torch

from fp8_cases import Case, all_codes_weight, bits, build, random_scales
from vllm_dualpath import layout, unpack

pytestmark = pytest.mark.interpreter

CASES = [
    # Channel-wise scales (per-tensor and per-shard arrive expanded to channel-wise).
    Case(64, 128, "channel"),
    Case(128, 64, "channel"),
    Case(256, 256, "channel"),
    Case(1, 1, "channel"),
    Case(3, 5, "tensor"),
    Case(65, 129, "channel"),
    Case(100, 300, "shard"),
    Case(127, 255, "channel"),
    Case(192, 320, "tensor"),
    Case(320, 192, "shard"),
    Case(1000, 72, "channel"),
    Case(72, 1000, "channel"),
    Case(130, 64, "channel"),
    # Block (128x128) quantization -> group-wise scales.
    Case(128, 128, "block"),
    Case(256, 384, "block"),
    Case(200, 300, "block"),
    Case(130, 260, "block"),
    Case(384, 128, "block"),  # a single K block: Marlin permutes it channel-wise
    Case(64, 512, "block"),
    Case(500, 640, "block"),
    Case(129, 1000, "block"),
    Case(96, 200, "block", seed=3),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_scaled_unpack_matches_reference_bit_for_bit(case: Case):
    weight, packed, stored, _ = build(case)
    assert torch.equal(layout.unpack_reference(packed)[: case.size_k, : case.size_n], weight.t())
    expected = layout.dequantize_reference(packed, stored, case.size_n, case.size_k)
    got = unpack.unpack_weight(packed, stored, case.size_n, case.size_k)
    assert got.shape == (case.size_n, case.size_k) and got.dtype == torch.bfloat16
    assert torch.equal(bits(got), bits(expected))


@pytest.mark.parametrize("case", CASES[:6] + CASES[13:16], ids=str)
def test_unscaled_unpack_gives_exact_fp8_values(case: Case):
    weight, packed, _, _ = build(case)
    got = unpack.unpack_weight(packed, None, case.size_n, case.size_k)
    expected = layout.decode_fp8_as_marlin(weight).to(torch.bfloat16)
    assert torch.equal(bits(got), bits(expected))


def test_reference_agrees_with_plain_torch_dequantization_on_normal_results():
    """Independent of the layout: fp8 -> float32 x scale -> bf16 with torch's own rounding."""
    case = Case(200, 300, "channel", seed=5)
    weight, packed, stored, _ = build(case)
    expected = layout.dequantize_reference(packed, stored, case.size_n, case.size_k)
    scale = layout.true_scales(layout.unpermute_scales(stored))[0, : case.size_n]
    plain = (layout.decode_fp8_as_marlin(weight) * scale[:, None]).float().to(torch.bfloat16)
    normal = plain.float().abs() >= 2.0**-126
    assert normal.float().mean() > 0.9
    assert torch.equal(bits(expected)[normal], bits(plain)[normal])


def test_data_exercises_rounding_so_truncation_would_fail():
    """Rounding toward zero (what the CPU interpreter's float casts do) differs on this data."""
    case = Case(256, 384, "block")
    _, packed, stored, _ = build(case)
    codes = layout.unpack_reference(packed)
    scales = layout.true_scales(layout.unpermute_scales(stored)).repeat_interleave(128, dim=0)
    exact = (layout.decode_fp8_as_marlin(codes) * scales).float()
    truncated = (exact.view(torch.int32) >> 16).to(torch.int16)
    nearest = bits(layout.round_to_bf16(exact.double()))
    assert (truncated != nearest).float().mean() > 0.2


# numpy (under the interpreter) warns about inf x 0 = NaN, which is the point of the test.
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_every_scale_bit_pattern_including_subnormal_inf_and_nan():
    """Stored scales over all 65536 BF16 patterns, against all 256 codes."""
    size_n, size_k = 256, 256 * layout.TILE
    generator = torch.Generator().manual_seed(11)
    weight = all_codes_weight(size_n, size_k, generator)
    codes = torch.zeros(size_k, size_n, dtype=torch.uint8)
    codes[:, :] = weight.t()
    packed = layout.repack_reference(codes)
    patterns = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
    # One group per 16-row tile, the smallest group the Marlin layout has.
    group_scales = patterns.view(torch.bfloat16).view(size_k // layout.TILE, size_n)
    stored = group_scales.contiguous()
    expected = layout.dequantize_reference(packed, stored, size_n, size_k)
    got = unpack.unpack_weight(packed, stored, size_n, size_k)
    assert torch.isnan(expected).any() and torch.isinf(expected).any()
    tiny = (expected != 0) & (expected.float().abs() < 2.0**-126)
    assert tiny.any()
    assert torch.equal(bits(got), bits(expected))


@pytest.mark.parametrize("k_fastest", [False, True])
@pytest.mark.parametrize("k_tiles", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("kind", ["block", "channel"])
def test_tile_counts_and_grid_order_do_not_change_the_result(
    kind: str, k_tiles: int, k_fastest: bool
):
    """Tiles of one program share a row of block scales up to 8 tiles (128 K rows), not at 16;
    channel-wise scales have one row: both ways of loading them, in either grid order."""
    case = Case(200, 300, kind, seed=2)
    _, packed, stored, _ = build(case)
    expected = layout.dequantize_reference(packed, stored, case.size_n, case.size_k)
    got = unpack.unpack_weight(
        packed, stored, case.size_n, case.size_k, k_tiles=k_tiles, k_fastest=k_fastest
    )
    assert torch.equal(bits(got), bits(expected))


def test_odd_rows_and_unaligned_buffers_take_the_element_store():
    case = Case(70, 130, "block", seed=5)
    _, packed, stored, _ = build(case)
    expected = layout.dequantize_reference(packed, stored, case.size_n, case.size_k)
    buffer = torch.zeros(case.size_n * case.size_k + 1, dtype=torch.bfloat16)
    got = unpack.unpack_weight(packed, stored, case.size_n, case.size_k, out=buffer[1:])
    assert got.data_ptr() % 4 == 2
    assert torch.equal(bits(got), bits(expected))


def test_writes_into_the_start_of_a_larger_buffer_and_nothing_else():
    case = Case(100, 300, "channel", seed=4)
    _, packed, stored, _ = build(case)
    sentinel = torch.tensor(-7.0, dtype=torch.bfloat16)
    buffer = torch.full((case.size_n * case.size_k + 999,), sentinel.item(), dtype=torch.bfloat16)
    got = unpack.unpack_weight(packed, stored, case.size_n, case.size_k, out=buffer)
    assert got.data_ptr() == buffer.data_ptr()
    expected = layout.dequantize_reference(packed, stored, case.size_n, case.size_k)
    assert torch.equal(bits(buffer[: got.numel()].view_as(got)), bits(expected))
    assert torch.equal(
        buffer[got.numel() :], torch.full((999,), sentinel.item(), dtype=torch.bfloat16)
    )


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda p, s, o: (p.to(torch.int64), s, o), "int32"),
        (lambda p, s, o: (p, s.float(), o), "bfloat16"),
        (lambda p, s, o: (p, s[:, :64].contiguous(), o), "do not match"),
        (lambda p, s, o: (p, s, torch.empty(10, dtype=torch.bfloat16)), "out must be"),
        (lambda p, s, o: (p, s.expand(40, -1).contiguous(), o), "not whole 16-row tiles"),
    ],
)
def test_rejects_inputs_it_cannot_read(mutate, message):
    case = Case(100, 300, "channel")
    _, packed, stored, _ = build(case)
    packed, stored, out = mutate(packed, stored, None)
    with pytest.raises(ValueError, match=message):
        unpack.unpack_weight(packed, stored, case.size_n, case.size_k, out=out)


def test_rejects_a_tile_count_that_is_not_a_power_of_two():
    _, packed, stored, _ = build(Case(100, 300, "channel"))
    with pytest.raises(ValueError, match="power of two"):
        unpack.unpack_weight(packed, stored, 100, 300, k_tiles=3)


def test_rejects_sizes_larger_than_the_packed_weight():
    _, packed, stored, _ = build(Case(100, 300, "channel"))
    with pytest.raises(ValueError, match="does not fit"):
        unpack.unpack_weight(packed, stored, 257, 300)


def test_zero_and_negative_channel_scales():
    size_n, size_k = 128, 256
    generator = torch.Generator().manual_seed(12)
    weight = all_codes_weight(size_n, size_k, generator)
    scales = random_scales((size_n,), generator)
    scales[::7] = 0.0
    scales[1::3] *= -1
    packed, stored, _ = layout.prepare_reference(weight.view(torch.float8_e4m3fn), scales)
    expected = layout.dequantize_reference(packed, stored, size_n, size_k)
    got = unpack.unpack_weight(packed, stored, size_n, size_k)
    assert (bits(expected) == -32768).any()  # negative zeros are part of the comparison
    assert torch.equal(bits(got), bits(expected))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("k_tiles", [8, 16])
@pytest.mark.parametrize("rare_row", [None, 0, 1])
def test_the_in_kernel_scale_check_alone_still_finds_every_rare_scale(
    monkeypatch, rare_row: int | None, k_tiles: int
):
    """Inside graph capture the host cannot look at the scales: the kernel checks them, in
    either group row, whether a program loads one row of scales (8 tiles) or two (16)."""
    monkeypatch.setattr(unpack, "_scales_are_ordinary", lambda scales: None)
    case = Case(128, 256, "block", seed=7)
    _, packed, stored, _ = build(case)
    if rare_row is not None:
        # A NaN with a payload the fast path would keep.
        stored.view(torch.int16)[rare_row, 5] = 0x7FC1
    expected = layout.dequantize_reference(packed, stored, case.size_n, case.size_k)
    got = unpack.unpack_weight(packed, stored, case.size_n, case.size_k, k_tiles=k_tiles)
    assert torch.equal(bits(got), bits(expected))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_new_scales_at_a_reused_address_are_checked_again():
    """A reloaded model may get the old scales' memory: the verdict must not carry over, even
    to a tensor whose version counter starts again at zero."""
    case = Case(128, 256, "block", seed=9)
    _, packed, stored, _ = build(case)
    unpack.unpack_weight(packed, stored.data, case.size_n, case.size_k)  # ordinary
    stored.data.view(torch.int16)[0, 7] = 0x7FC1  # a NaN with a payload, through a fresh .data
    fresh = stored.data  # same memory, a new tensor, version 0
    assert fresh._version == 0
    expected = layout.dequantize_reference(packed, fresh, case.size_n, case.size_k)
    got = unpack.unpack_weight(packed, fresh, case.size_n, case.size_k)
    assert torch.equal(bits(got), bits(expected))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_a_scale_changed_in_place_is_checked_again():
    case = Case(128, 256, "block", seed=8)
    _, packed, stored, _ = build(case)
    unpack.unpack_weight(packed, stored, case.size_n, case.size_k)
    stored.view(torch.int16)[1, 3] = 0x7FC1  # a NaN with a payload the fast path would keep
    expected = layout.dequantize_reference(packed, stored, case.size_n, case.size_k)
    got = unpack.unpack_weight(packed, stored, case.size_n, case.size_k)
    assert torch.equal(bits(got), bits(expected))


def test_a_launch_is_repeated_only_for_the_same_arguments():
    """The key of a repeated (direct) launch changes with everything that decides the launch."""
    _, packed, stored, _ = build(Case(128, 256, "block", seed=8))
    out = torch.empty(128 * 256 + 64, dtype=torch.bfloat16)

    def key(**change: object) -> tuple[object, ...]:
        arguments: dict[str, object] = {
            "packed": packed,
            "scales": stored,
            "size_n": 128,
            "size_k": 256,
            "out": out,
            "k_tiles": 4,
            "num_warps": 4,
        }
        arguments.update(change)
        return unpack._launch_key(**arguments)  # type: ignore[arg-type]

    first = key()
    assert key() == first
    others = [
        key(out=out[64:]),
        key(scales=None),
        key(scales=stored.clone()),
        key(size_k=240),
        key(k_tiles=2),
        key(num_warps=8),
        key(k_fastest=not unpack.DEFAULT_K_FASTEST),
    ]
    assert all(other != first for other in others)
    stored.view(torch.int16)[0, 0] = 0x7F80  # +inf in place: same address, new verdict
    assert key() != first


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("rare", [False, True])
def test_inference_tensors_are_unpacked_with_the_scales_checked_in_the_kernel(rare: bool):
    """A weight made under torch.inference_mode keeps no version counter: no verdict can be
    kept for its scales, so the kernel checks them on every call, in or out of that mode."""
    case = Case(128, 256, "block", seed=11)
    _, packed, stored, _ = build(case)
    if rare:
        stored.view(torch.int16)[0, 5] = 0x7FC1
    expected = layout.dequantize_reference(packed, stored, case.size_n, case.size_k)
    with torch.inference_mode():
        packed, stored = packed.clone(), stored.clone()
    assert stored.is_inference() and unpack.tensor_version(stored) is None
    assert unpack._scales_are_ordinary(stored) is None
    for _ in range(2):
        got = unpack.unpack_weight(packed, stored, case.size_n, case.size_k)
        assert torch.equal(bits(got), bits(expected))
    with torch.inference_mode():
        got = unpack.unpack_weight(packed, stored, case.size_n, case.size_k)
    assert torch.equal(bits(got), bits(expected))
