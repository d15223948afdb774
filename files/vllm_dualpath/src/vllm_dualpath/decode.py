"""Marlin FP8 words -> BF16 weight values in Triton registers, for the unpack kernel.

Every weight element is FP8 value x true scale rounded to BF16 once, to nearest even. No step
depends on how a backend rounds float -> bf16 casts, so the GPU and Triton's CPU interpreter
(whose casts truncate) give the same bits:

* a code's bits shifted into BF16 position read as value x 2**-120, exactly (an fp32 subnormal
  for FP8 subnormals; compiled kernels keep subnormals, they are built without flush-to-zero),
  and the stored scale carries the 2**120 back;
* with an ordinary true scale (>= 2**-117, finite, or zero), value x scale is exact and normal
  in fp32 (4 x 8 significant bits), and it is rounded to BF16 with integer arithmetic on its bits;
* a block whose scales include any other (tiny, infinite or NaN) computes everything on
  integers instead (``_scaled_bits_on_integers``), subnormal results included. The host checks
  each weight's scales once (``scales_are_ordinary``), so blocks of ordinary weights skip the
  in-kernel check.

Words are read with contiguous 16-byte loads and un-shuffled in registers (``decoded_pairs``).
See ``layout`` for the index math this inverts.
"""

from __future__ import annotations

import weakref

import torch
import triton
import triton.language as tl


@triton.jit
def _scaled_bits_on_integers(code, scale_bits):  # type: ignore[no-untyped-def]
    """BF16 bits of e4m3 code x (BF16 scale bits / 2**120), rounded to nearest even, for any
    input: subnormal results, tiny, infinite and NaN scales included. All integer arithmetic."""
    code_exp = (code >> 3) & 15
    significand = tl.where(code_exp == 0, code & 7, (code & 7) | 8)
    scale_exp = (scale_bits >> 7) & 255
    scale_mantissa = scale_bits & 127
    scale_significand = tl.where(scale_exp == 0, scale_mantissa, scale_mantissa | 128)
    # value = significand * 2**(max(e, 1) - 10); stored scale = significand * 2**(e - 134).
    exponent = tl.maximum(code_exp, 1) - 10 + tl.maximum(scale_exp, 1) - 254
    product = significand * scale_significand
    sign = (code >> 7) ^ ((scale_bits >> 15) & 1)

    # Normalise the (at most 12-bit) integer product through an exact int -> fp32 conversion.
    product_bits = product.to(tl.float32).to(tl.int32, bitcast=True)
    biased = (product_bits >> 23) - 127 + exponent + 127
    full_significand = (product_bits & 0x7FFFFF) | 0x800000
    # Keep 8 significant bits (fewer on the BF16 subnormal grid), round to nearest even.
    drop = tl.minimum(16 + tl.maximum(1 - biased, 0), 30)
    kept = full_significand >> drop
    rest = full_significand & ((1 << drop) - 1)
    half = 1 << (drop - 1)
    round_up = (rest > half) | ((rest == half) & ((kept & 1) == 1))
    magnitude = (tl.maximum(biased - 1, 0) << 7) + kept + round_up.to(tl.int32)
    magnitude = tl.minimum(magnitude, 0x7F80)
    magnitude = tl.where(product == 0, 0, magnitude)
    bits = (sign << 15) | magnitude

    # Infinite or NaN scales (an exponent field of 255) follow IEEE: inf x 0 is NaN.
    special = scale_exp == 255
    is_nan = special & ((scale_mantissa != 0) | (significand == 0))
    bits = tl.where(special, (sign << 15) | 0x7F80, bits)
    return tl.where(is_nan, 0x7FC0, bits)


@triton.jit
def scale_column(n, GROUPED: tl.constexpr):  # type: ignore[no-untyped-def]
    """Column of channel n in the permuted scale rows (see ``layout.permute_scales``)."""
    if GROUPED:
        # Group-wise scales: an 8x8 transpose inside every block of 64 channels.
        c = n & 63
        return (n - c) + 8 * (c & 7) + (c >> 3)
    # Channel-wise scales: blocks of 32, position 8i + 2a + b holds channel 8a + 2i + b.
    c = n & 31
    return (n - c) + 8 * ((c & 7) >> 1) + 2 * (c >> 3) + (c & 1)


@triton.jit
def scaled_pair(pair_codes, scale_bits, HAS_SCALES: tl.constexpr):  # type: ignore[no-untyped-def]
    """Two BF16 results packed in an int32 from two e4m3 codes in bytes 0 and 2 of pair_codes.

    Marlin's own trick: a code's sign and 7 low bits shifted into BF16 position read as
    value x 2**-120 (NaN codes read as +-480 x 2**-120, as in Marlin), and the stored scale
    carries the 2**120 back. In fp32 the product value x true scale is exact and normal for an
    ordinary scale; the fp32 -> BF16 rounding is done on integer bits (nearest even).
    """
    raw = ((pair_codes & 0x007F007F) << 4) | ((pair_codes & 0x00800080) << 8)
    low = (raw << 16).to(tl.float32, bitcast=True)
    high = (raw & -65536).to(tl.float32, bitcast=True)
    # Without scales, 2**120 exactly: the unscaled FP8 value.
    scale = (scale_bits << 16).to(tl.float32, bitcast=True) if HAS_SCALES else 1.329227995784916e36
    low_bits = (low * scale).to(tl.int32, bitcast=True)
    high_bits = (high * scale).to(tl.int32, bitcast=True)
    low_bits = ((low_bits + 0x7FFF + ((low_bits >> 16) & 1)) >> 16) & 0xFFFF
    high_bits = (high_bits + 0x7FFF + ((high_bits >> 16) & 1)) & -65536
    return low_bits | high_bits


@triton.jit
def rare_pair(pair_codes, scale_bits):  # type: ignore[no-untyped-def]
    """``scaled_pair`` for any scale (tiny, infinite, NaN), on integers alone."""
    low = _scaled_bits_on_integers(pair_codes & 0xFF, scale_bits)
    high = _scaled_bits_on_integers((pair_codes >> 16) & 0xFF, scale_bits)
    return (low & 0xFFFF) | (high << 16)


@triton.jit
def decoded_pairs(  # type: ignore[no-untyped-def]
    packed_ptr,
    scales_ptr,
    tile_n,
    block_k,
    size_n,
    k_tiles,
    words_per_row,
    padded_n,
    k_per_group,
    HAS_SCALES: tl.constexpr,
    GROUPED: tl.constexpr,
    CHECK_SCALES: tl.constexpr,
    K_TILES: tl.constexpr,
):
    """int32 [64, K_TILES * 8]: weight rows n = 64 * tile_n + i, each a row of BF16 pairs (even
    K in the low half) from K = 16 * K_TILES * block_k on; zero past the weight.

    The block is K_TILES 16x64 tiles of one column, each 256 consecutive words, read with plain
    contiguous loads. Word 32a + 8t + 2w + r of tile kt holds channel 16w + 8r + a of the tile,
    K rows 16kt + 2t + {0, 1} in bytes {0, 2} and 16kt + 8 + 2t + {0, 1} in bytes {1, 3}: each
    byte pair is two neighbouring BF16 results. The block is un-shuffled in registers.
    """
    tile_rows = block_k * K_TILES + tl.arange(0, K_TILES)[:, None]
    word_columns = tile_n * 256 + tl.arange(0, 256)[None, :]
    in_weight = tile_rows < k_tiles
    flat = tl.load(packed_ptr + tile_rows * words_per_row + word_columns, mask=in_weight, other=0)
    words = tl.reshape(flat, (K_TILES, 8, 4, 4, 2))
    kt = block_k * K_TILES + tl.arange(0, K_TILES)[:, None, None, None, None]
    a = tl.arange(0, 8)[None, :, None, None, None]
    w = tl.arange(0, 4)[None, None, None, :, None]
    r = tl.arange(0, 2)[None, None, None, None, :]
    n = tile_n * 64 + 16 * w + 8 * r + a
    low_codes = words & 0x00FF00FF
    high_codes = (words >> 8) & 0x00FF00FF

    if HAS_SCALES:
        columns = scale_column(n, GROUPED)
        if GROUPED:
            # k_per_group is a multiple of 16 (checked by the caller): one group per tile row.
            columns += (kt * 16 // k_per_group) * padded_n
        scale_mask = (kt < k_tiles) & (n < size_n)
        scale_bits = tl.load(scales_ptr + columns, mask=scale_mask, other=0).to(tl.int32)
        scale_bits = scale_bits & 0xFFFF
        rare = 0
        if CHECK_SCALES:
            # Ordinary scales: true scale (stored x 2**-120) >= 2**-117, finite, or zero; then
            # the fp32 product is exact and normal. Blocks holding any other take the integer
            # path. The host skips this check (a block-wide reduction) for weights it has
            # checked once (``scales_are_ordinary``).
            scale_exp = (scale_bits >> 7) & 255
            odd = ((scale_exp < 130) & ((scale_bits & 0x7FFF) != 0)) | (scale_exp == 255)
            rare = tl.max((odd & scale_mask).to(tl.int32))
        if rare > 0:
            low = rare_pair(low_codes, scale_bits)
            high = rare_pair(high_codes, scale_bits)
        else:
            low = scaled_pair(low_codes, scale_bits, True)
            high = scaled_pair(high_codes, scale_bits, True)
    else:
        low = scaled_pair(low_codes, 0, False)
        high = scaled_pair(high_codes, 0, False)

    # Axes (kt, a, t, w, r, half) -> (w, r, a | kt, half, t): rows n, K pairs in order.
    pairs = tl.permute(tl.join(low, high), (3, 4, 1, 0, 5, 2))
    return tl.reshape(pairs, (64, K_TILES * 8))


# Per scale tensor address: (the tensor, its version, its verdict). The weak reference and the
# version make a verdict die with its tensor and with any in-place change; one entry per address.
_ordinary: dict[int, tuple[weakref.ref[torch.Tensor], int, bool]] = {}


def scales_are_ordinary(scales: torch.Tensor) -> bool | None:
    """True when every stored scale is ordinary (see ``decoded_pairs``), once per weight version;
    None when unknown (first seen while a CUDA graph is captured: no host sync allowed)."""
    known = _ordinary.get(scales.data_ptr())
    if known is not None and known[0]() is scales and known[1] == scales._version:
        return known[2]
    if scales.is_cuda and torch.cuda.is_current_stream_capturing():
        return None
    bits = scales.view(torch.int16).to(torch.int32) & 0xFFFF
    exponent = (bits >> 7) & 255
    odd = ((exponent < 130) & ((bits & 0x7FFF) != 0)) | (exponent == 255)
    verdict = not bool(odd.any())
    _ordinary[scales.data_ptr()] = (weakref.ref(scales), scales._version, verdict)
    return verdict
