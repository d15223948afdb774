"""Index math of vLLM's Marlin FP8 (W8A16) weight format, and a plain-PyTorch reference of it.

The reference (for clarity, not speed) packs as ``gptq_marlin_repack(num_bits=8)`` does, undoes
it, and dequantizes with its own exact rounding: what ``unpack`` is checked against on the CPU.

Facts (vLLM 0.33/0.34, ``marlin_utils.py``, ``marlin_utils_fp8.py``, ``gptq_marlin_repack.cu``):

* the FP8 e4m3 weight W[k, n] is zero-padded to (padded_k, padded_n) and repacked to int32
  ``[padded_k / 16, 4 * padded_n]``; byte ``b`` of ``packed[kt, nt*256 + th*8 + w*2 + r]``
  (``th`` < 32, ``w`` < 4, ``r`` < 2) holds ``W[16*kt + 2*(th % 4) + (0, 8, 1, 9)[b],
  64*nt + 16*w + 8*r + th // 4]``;
* scales are BF16, one row per group (one row in all for channel-wise), permuted in blocks of
  32 (channel-wise) or 64 (group-wise), and multiplied by 2**120 because Marlin turns an FP8 byte
  into BF16 by shifting its bits, which leaves the exponent 120 too small;
* that bit shift also turns the e4m3fn NaN codes 0x7F/0xFF into the finite values +-480.
"""

from __future__ import annotations

import math
from typing import Final

import torch

TILE: Final = 16
MIN_THREAD_N: Final = 64
MIN_THREAD_K: Final = 128
BYTES_PER_WORD: Final = 4

# Marlin folds this into BF16 scales (2**(8-1) - 2**(4-1) = 120 between the exponent biases).
BF16_EXPONENT_BIAS_LOG2: Final = 120
BF16_EXPONENT_BIAS: Final = 2.0**BF16_EXPONENT_BIAS_LOG2

# Value Marlin's bit-shift decode gives the e4m3fn NaN byte (S.1111.111): 1.875 * 2**8.
MARLIN_NAN_CODE_MAGNITUDE: Final = 480.0

_K_OFFSET_OF_BYTE: Final = (0, 8, 1, 9)

# marlin_permute_scales: channel-wise permutes blocks of 32, group-wise blocks of 64.
CHANNEL_PERM: Final = tuple(2 * i + j for i in range(4) for j in (0, 1, 8, 9, 16, 17, 24, 25))
GROUP_PERM: Final = tuple(i + 8 * j for i in range(8) for j in range(8))


def _round_up(value: int, multiple: int) -> int:
    return (value + multiple - 1) // multiple * multiple


def marlin_padded_nk(size_n: int, size_k: int, group_size: int = -1) -> tuple[int, int]:
    """Smallest (padded_n, padded_k) of the (n%64, k%128) or (n%128, k%64) tile families."""
    group = group_size if group_size > 0 else 1
    candidates = (
        (_round_up(size_n, 64), _round_up(size_k, math.lcm(128, group))),
        (_round_up(size_n, 128), _round_up(size_k, math.lcm(64, group))),
    )
    return min(candidates, key=lambda nk: (nk[0] * nk[1], nk[0] + nk[1]))


def marlin_repacked_nk(packed: torch.Tensor) -> tuple[int, int]:
    """(padded_n, padded_k) a packed FP8 weight was repacked with, from its shape."""
    return packed.shape[1] * BYTES_PER_WORD // TILE, packed.shape[0] * TILE


def _tile_index() -> tuple[torch.Tensor, torch.Tensor]:
    """(k, n) inside a 16x64 tile for every (th, w, r, b) of the tile's 256 words."""
    th = torch.arange(32).view(32, 1, 1, 1)
    w = torch.arange(4).view(1, 4, 1, 1)
    r = torch.arange(2).view(1, 1, 2, 1)
    b_offset = torch.tensor(_K_OFFSET_OF_BYTE).view(1, 1, 1, 4)
    k_in_tile = (2 * (th % 4) + b_offset).expand(32, 4, 2, 4)
    n_in_tile = (16 * w + 8 * r + th // 4).expand(32, 4, 2, 4)
    return k_in_tile, n_in_tile


def repack_reference(weight_kn: torch.Tensor) -> torch.Tensor:
    """FP8 weight [padded_k, padded_n] (float8_e4m3fn or uint8) -> Marlin int32 [k/16, 4n]."""
    bytes_kn = weight_kn.contiguous().view(torch.uint8)
    size_k, size_n = bytes_kn.shape
    if size_k % TILE or size_n % MIN_THREAD_N:
        raise ValueError(f"repack needs k % 16 == 0 and n % 64 == 0, got k={size_k}, n={size_n}")
    tiles = bytes_kn.view(size_k // TILE, TILE, size_n // 64, 64).permute(0, 2, 1, 3)
    k_in_tile, n_in_tile = _tile_index()
    words = tiles[:, :, k_in_tile, n_in_tile]  # [kt, nt, th, w, r, b]
    return words.contiguous().view(torch.int32).view(size_k // TILE, 4 * size_n)


def unpack_reference(packed: torch.Tensor) -> torch.Tensor:
    """Marlin int32 [k/16, 4n] -> FP8 bytes as uint8 [padded_k, padded_n]; inverse of repack."""
    size_n, size_k = marlin_repacked_nk(packed)
    words = packed.contiguous().view(torch.uint8).view(size_k // TILE, size_n // 64, 32, 4, 2, 4)
    tiles = torch.empty(size_k // TILE, size_n // 64, TILE, 64, dtype=torch.uint8)
    k_in_tile, n_in_tile = _tile_index()
    tiles[:, :, k_in_tile, n_in_tile] = words
    return tiles.permute(0, 2, 1, 3).reshape(size_k, size_n)


def _inverse(perm: tuple[int, ...]) -> list[int]:
    inverse = [0] * len(perm)
    for position, source in enumerate(perm):
        inverse[source] = position
    return inverse


def permute_scales(scales: torch.Tensor, size_k: int, size_n: int, group_size: int) -> torch.Tensor:
    """What marlin_permute_scales does to [groups, size_n] scales."""
    perm = GROUP_PERM if 0 < group_size < size_k else CHANNEL_PERM
    return scales.reshape(-1, len(perm))[:, list(perm)].reshape(-1, size_n).contiguous()


def unpermute_scales(permuted: torch.Tensor) -> torch.Tensor:
    """Inverse of permute_scales; one row means channel-wise, several mean group-wise."""
    perm = CHANNEL_PERM if permuted.shape[0] == 1 else GROUP_PERM
    size_n = permuted.shape[1]
    return permuted.reshape(-1, len(perm))[:, _inverse(perm)].reshape(-1, size_n).contiguous()


def permute_bias(bias: torch.Tensor) -> torch.Tensor:
    """What marlin_permute_bias does to a padded [padded_n] bias."""
    return bias.reshape(-1, len(CHANNEL_PERM))[:, list(CHANNEL_PERM)].reshape(bias.shape)


def unpermute_channels(permuted: torch.Tensor) -> torch.Tensor:
    """Inverse of permute_bias (and of the channel-wise scale permutation) on the last dim.

    Views and one copy, no index tensor: safe inside CUDA-graph capture. Position 8*i + 2*a + b
    of a 32-block holds channel 8*a + 2*i + b (i, a < 4, b < 2).
    """
    blocks = permuted.reshape(*permuted.shape[:-1], -1, 4, 4, 2)
    return blocks.transpose(-3, -2).reshape(permuted.shape)


def fuse_exponent_bias(scales: torch.Tensor) -> torch.Tensor:
    """BF16 scales as Marlin stores them (exact: a power-of-two factor)."""
    return scales.to(torch.bfloat16) * torch.tensor(BF16_EXPONENT_BIAS, dtype=torch.bfloat16)


def true_scales(stored: torch.Tensor) -> torch.Tensor:
    """Stored (biased) BF16 scales -> the true scales in float64, exactly."""
    return stored.to(torch.float64) * 2.0**-BF16_EXPONENT_BIAS_LOG2


def decode_fp8_as_marlin(codes: torch.Tensor) -> torch.Tensor:
    """e4m3fn bytes -> float64 values as Marlin decodes them (NaN codes become +-480)."""
    codes = codes.view(torch.uint8)
    values = codes.view(torch.float8_e4m3fn).to(torch.float64)
    nan_code = (codes & 0x7F) == 0x7F
    signed_480 = torch.where(codes >= 0x80, -MARLIN_NAN_CODE_MAGNITUDE, MARLIN_NAN_CODE_MAGNITUDE)
    return torch.where(nan_code, signed_480.to(torch.float64), values)


_BF16_MIN_NORMAL_LOG2: Final = -126
CANONICAL_NAN_BITS: Final = 0x7FC0
_BF16_SUBNORMAL_UNIT_LOG2: Final = -133


def round_to_bf16(exact: torch.Tensor) -> torch.Tensor:
    """float64 values with at most 24 significant bits -> BF16, rounded to nearest even once;
    every NaN becomes the quiet NaN 0x7FC0. Values below fp32's normal range are rounded on the
    BF16 subnormal grid directly, so nothing rounds twice."""
    tiny = exact.abs() < 2.0**_BF16_MIN_NORMAL_LOG2
    on_grid = torch.round(exact * 2.0**-_BF16_SUBNORMAL_UNIT_LOG2) * 2.0**_BF16_SUBNORMAL_UNIT_LOG2
    chosen = torch.where(tiny, on_grid, exact)
    rounded = chosen.to(torch.float32).to(torch.bfloat16)
    # One NaN encoding for every NaN (the unpack kernel writes the same), payloads are not kept.
    canonical_nan = torch.tensor(CANONICAL_NAN_BITS, dtype=torch.int16).view(torch.bfloat16)
    return torch.where(torch.isnan(exact), canonical_nan, rounded)


def dequantize_reference(
    packed: torch.Tensor,
    stored_scales: torch.Tensor | None,
    size_n: int,
    size_k: int,
) -> torch.Tensor:
    """BF16 W[size_n, size_k] = FP8 value x true scale, rounded once (no scales: values only)."""
    codes = unpack_reference(packed)
    values = decode_fp8_as_marlin(codes)
    if stored_scales is not None:
        scales = true_scales(unpermute_scales(stored_scales))
        group_rows = codes.shape[0] // scales.shape[0]
        values = values * scales.repeat_interleave(group_rows, dim=0)
    return round_to_bf16(values)[:size_k, :size_n].t().contiguous()


def expand_scales(
    scales: torch.Tensor, size_n: int, size_k: int, block: tuple[int, int] | None
) -> torch.Tensor:
    """Checkpoint scales -> [groups, size_n] as prepare_fp8_layer_for_marlin expands them.

    Per-tensor (one value), per-shard (n divisible by their count) and per-channel scales become
    one channel-wise row; block scales [ceil(n/bn), k/bk] become one row per k block.
    """
    if block is not None:
        block_n, _ = block
        return scales.t().repeat_interleave(block_n, dim=1)[:, :size_n].contiguous()
    flat = scales.reshape(-1)
    if flat.numel() == size_n:
        return flat.view(1, size_n)
    if size_n % flat.numel():
        raise ValueError(f"{flat.numel()} scales do not divide {size_n} channels")
    return flat.view(1, -1).repeat_interleave(size_n // flat.numel(), dim=1)


def prepare_reference(
    weight_nk: torch.Tensor,
    scales: torch.Tensor,
    bias: torch.Tensor | None = None,
    block: tuple[int, int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """FP8 weight [n, k] + checkpoint scales -> (packed, stored scales, permuted bias).

    Mirrors vLLM's prepare_fp8_layer_for_marlin (BF16 activations), with this module's repack.
    """
    size_n, size_k = weight_nk.shape
    group_size = -1 if block is None else block[1]
    padded_n, padded_k = marlin_padded_nk(size_n, size_k, group_size)
    codes = torch.zeros(padded_k, padded_n, dtype=torch.uint8)
    codes[:size_k, :size_n] = weight_nk.contiguous().view(torch.uint8).t()
    packed = repack_reference(codes)

    rows = expand_scales(scales.to(torch.bfloat16), size_n, size_k, block)
    groups = 1 if block is None else padded_k // group_size
    padded_scales = torch.zeros(groups, padded_n, dtype=torch.bfloat16)
    padded_scales[: rows.shape[0], :size_n] = rows
    stored = fuse_exponent_bias(permute_scales(padded_scales, padded_k, padded_n, group_size))

    stored_bias = None
    if bias is not None:
        padded_bias = torch.zeros(padded_n, dtype=bias.dtype)
        padded_bias[:size_n] = bias
        stored_bias = permute_bias(padded_bias)
    return packed, stored, stored_bias
