"""The plain-PyTorch reference of the Marlin FP8 layout."""

from __future__ import annotations

import pytest
import torch

from fp8_cases import all_codes_weight
from vllm_dualpath import layout


@pytest.mark.parametrize(
    ("size_n", "size_k", "group", "expected"),
    [
        (64, 128, -1, (64, 128)),
        (128, 64, -1, (128, 64)),
        (200, 300, -1, (256, 320)),
        (200, 300, 128, (256, 384)),
        (1, 1, -1, (64, 128)),
        (4096, 4096, 128, (4096, 4096)),
        (130, 64, -1, (256, 64)),
    ],
)
def test_padded_nk_picks_the_cheaper_tile_family(size_n, size_k, group, expected):
    assert layout.marlin_padded_nk(size_n, size_k, group) == expected


def test_repack_places_every_byte_where_the_marlin_layout_says():
    generator = torch.Generator().manual_seed(1)
    codes = all_codes_weight(32, 128, generator).t().contiguous()  # [k=128, n=32]
    codes = torch.cat([codes, codes.flip(0)], dim=1)  # n = 64
    packed = layout.repack_reference(codes)
    assert packed.shape == (8, 256) and packed.dtype == torch.int32
    raw = packed.view(torch.uint8).view(8, 256, 4)
    # Spot-check the documented formula independently of the reference's vectorised indexing.
    for kt, column, byte in [(0, 0, 0), (0, 0, 1), (3, 255, 3), (7, 77, 2), (5, 130, 1)]:
        th, rest = divmod(column % 256, 8)
        w, r = divmod(rest, 2)
        k = 16 * kt + 2 * (th % 4) + (0, 8, 1, 9)[byte]
        n = 64 * (column // 256) + 16 * w + 8 * r + th // 4
        assert raw[kt, column, byte] == codes[k, n]


def test_unpack_inverts_repack_on_padded_shapes():
    generator = torch.Generator().manual_seed(2)
    codes = all_codes_weight(256, 384, generator)
    packed = layout.repack_reference(codes)
    assert layout.marlin_repacked_nk(packed) == (384, 256)
    assert torch.equal(layout.unpack_reference(packed), codes)


@pytest.mark.parametrize(("size_k", "group"), [(256, -1), (512, 128), (128, 128)])
def test_scale_permutation_round_trips(size_k, group):
    size_n = 192
    groups = 1 if group == -1 else size_k // group
    scales = torch.randn(groups, size_n).to(torch.bfloat16)
    permuted = layout.permute_scales(scales, size_k, size_n, group)
    assert not torch.equal(permuted, scales)
    assert torch.equal(layout.unpermute_scales(permuted), scales)


def test_channel_unpermutation_by_views_matches_the_index_inverse():
    bias = torch.arange(128, dtype=torch.float32)
    permuted = layout.permute_bias(bias)
    assert permuted[:8].tolist() == [0, 1, 8, 9, 16, 17, 24, 25]
    assert torch.equal(layout.unpermute_channels(permuted), bias)
    two_rows = torch.stack([permuted, permuted + 1000])
    assert torch.equal(layout.unpermute_channels(two_rows), torch.stack([bias, bias + 1000]))


def test_exponent_bias_is_exact_and_reversible():
    scales = torch.tensor([1e-3, 0.37, 2.0**-30, 200.0]).to(torch.bfloat16)
    stored = layout.fuse_exponent_bias(scales)
    assert torch.equal(layout.true_scales(stored), scales.double())


def test_nan_codes_decode_to_480_like_marlins_bit_shift():
    codes = torch.tensor([0x7F, 0xFF, 0x7E, 0x01, 0x80], dtype=torch.uint8)
    values = layout.decode_fp8_as_marlin(codes)
    assert values.tolist() == [480.0, -480.0, 448.0, 2.0**-9, -0.0]


def test_round_to_bf16_is_nearest_even_on_normals_and_subnormals():
    one_plus_half_ulp = 1 + 2.0**-8  # tie -> even (1.0)
    one_plus_three_half_ulp = 1 + 3 * 2.0**-8  # tie -> even (1 + 2**-6)
    subnormal_tie = 2.5 * 2.0**-133  # tie on the subnormal grid -> 2 units
    values = torch.tensor(
        [one_plus_half_ulp, one_plus_three_half_ulp, subnormal_tie, 1.5 * 2.0**-133],
        dtype=torch.float64,
    )
    rounded = layout.round_to_bf16(values).double().tolist()
    assert rounded == [1.0, 1 + 2.0**-6, 2 * 2.0**-133, 2 * 2.0**-133]
