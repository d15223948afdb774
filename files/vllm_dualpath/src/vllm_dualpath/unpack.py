"""One-pass Triton unpack: Marlin-packed FP8 weight (+ permuted scales) -> BF16 W[n, k] row-major.

Every output element is FP8 value x true scale rounded to BF16 once, to nearest even. No step
depends on how a backend rounds float -> bf16 casts or treats subnormals, so the GPU and Triton's
CPU interpreter (whose casts truncate) give the same bits:

* the FP8 value is built as an exact, normal fp32 from its bits;
* with an ordinary true scale (>= 2**-117, finite, or zero), value x scale is exact and normal
  in fp32 (4 x 8 significant bits), and it is rounded to BF16 with integer arithmetic on its bits;
* a program whose scales include any other (tiny, infinite or NaN) computes everything on
  integers instead (``_scaled_bits_on_integers``), subnormal results included.

See ``layout`` for the index math this inverts.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from vllm_dualpath import layout

# Tile of the output each program writes; the GPU benchmark may pick others.
DEFAULT_BLOCK_N = 64
DEFAULT_BLOCK_K = 128


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


@triton.jit  # type: ignore[untyped-decorator]
def _unpack_kernel(  # type: ignore[no-untyped-def]
    packed_ptr,
    scales_ptr,
    out_ptr,
    size_n,
    size_k,
    words_per_row,
    padded_n,
    k_per_group,
    out_row_stride,
    HAS_SCALES: tl.constexpr,
    GROUPED: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    # Each word is read once. Word (kt, n, t) holds k = 16*kt + 8*h + 2*t + l in byte h + 2*l,
    # so axes (n, kt, h, t, l) enumerate the output tile in row-major (n, k) order.
    BLOCK_KT: tl.constexpr = BLOCK_K // 16
    n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)[:, None, None, None, None]
    kt = tl.program_id(1) * BLOCK_KT + tl.arange(0, BLOCK_KT)[None, :, None, None, None]
    h = tl.arange(0, 2)[None, None, :, None, None]
    t = tl.arange(0, 4)[None, None, None, :, None]
    lo = tl.arange(0, 2)[None, None, None, None, :]
    k = kt * 16 + 8 * h + 2 * t + lo
    inside = (n < size_n) & (k < size_k)

    # Inverse of the repack: word kt * words_per_row + 256*(n//64) + 8*th + 2*w + r, with
    # th = 4*(n%8) + t, w = (n%64)//16, r = (n%16)//8. One 16x64 tile is 256 consecutive words.
    n_in_tile = n & 63
    column = (n >> 6) * 256 + 32 * (n_in_tile & 7) + 8 * t + 2 * (n_in_tile >> 4)
    column += (n_in_tile >> 3) & 1
    word_mask = (n < size_n) & (kt * 16 < size_k)
    word = tl.load(packed_ptr + kt * words_per_row + column, mask=word_mask, other=0)
    code = (word >> (8 * (h + 2 * lo))) & 0xFF

    code_exp = (code >> 3) & 15
    sign = code >> 7
    # |e4m3 value| in fp32, exact and never subnormal, decoded as Marlin does (NaN codes: 480).
    normal_bits = ((code & 0x7F) << 20) + (120 << 23)
    value = tl.where(
        code_exp == 0,
        (code & 7).to(tl.float32) * 0.001953125,  # subnormal: mantissa * 2**-9
        normal_bits.to(tl.float32, bitcast=True),
    )

    if HAS_SCALES:
        if GROUPED:
            # Group-wise scales: an 8x8 transpose inside every block of 64 channels.
            c = n_in_tile
            scale_index = (k // k_per_group) * padded_n + (n - c) + 8 * (c & 7) + (c >> 3)
            scale_mask = inside
        else:
            # Channel-wise scales: blocks of 32, position 8i + 2a + b holds channel 8a + 2i + b.
            c = n & 31
            scale_index = (n - c) + 8 * ((c & 7) >> 1) + 2 * (c >> 3) + (c & 1)
            scale_mask = n < size_n
        scale_bits = tl.load(scales_ptr + scale_index, mask=scale_mask, other=0).to(tl.int32)
        scale_bits = scale_bits & 0xFFFF
        scale_exp = (scale_bits >> 7) & 255
        # Ordinary scales: true scale (stored * 2**-120) >= 2**-117, finite, or zero. Then the
        # scale is a normal float, and value x scale (4 x 8 significant bits, >= 2**-9 * 2**-117
        # when not zero) is exact and normal in fp32; it is rounded to BF16 on its bits, so no
        # float -> bf16 cast is involved. Programs holding any other scale take the integer path.
        rare = ((scale_exp < 130) & ((scale_bits & 0x7FFF) != 0)) | (scale_exp == 255)
        if tl.max((rare & scale_mask).to(tl.int32)) > 0:
            bits = _scaled_bits_on_integers(code, scale_bits)
        else:
            # 7.52316384526264e-37 is 2**-120 exactly.
            true_scale = (scale_bits << 16).to(tl.float32, bitcast=True) * 7.52316384526264e-37
            product_bits = (value * true_scale).to(tl.int32, bitcast=True)
            bits = ((product_bits + 0x7FFF + ((product_bits >> 16) & 1)) >> 16) ^ (sign << 15)
    else:
        # FP8 values are exact in BF16: the top half of the fp32 bits.
        bits = (value.to(tl.int32, bitcast=True) >> 16) | (sign << 15)

    out_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)[:, None]
    out_k = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)[None, :]
    tile = tl.reshape(bits.to(tl.int16), (BLOCK_N, BLOCK_K))
    out_mask = (out_n < size_n) & (out_k < size_k)
    tl.store(out_ptr + out_n * out_row_stride + out_k, tile, mask=out_mask)


def _check(packed: torch.Tensor, scales: torch.Tensor | None, size_n: int, size_k: int) -> int:
    """Validate the inputs; return the number of K rows per scale group (0 without scales)."""
    if packed.dtype != torch.int32 or packed.dim() != 2 or not packed.is_contiguous():
        raise ValueError("packed weight must be a contiguous 2-D int32 tensor")
    padded_n, padded_k = layout.marlin_repacked_nk(packed)
    if padded_n % layout.MIN_THREAD_N:
        raise ValueError(
            f"packed weight has {packed.shape[1]} words per row, not a multiple of 256"
        )
    if not (0 < size_n <= padded_n and 0 < size_k <= padded_k):
        raise ValueError(f"size {size_n}x{size_k} does not fit the packed {padded_n}x{padded_k}")
    if scales is None:
        return 0
    if scales.dtype != torch.bfloat16 or scales.dim() != 2 or not scales.is_contiguous():
        raise ValueError("scales must be a contiguous 2-D bfloat16 tensor")
    groups, scale_n = scales.shape
    if scale_n != padded_n or groups == 0 or padded_k % groups:
        raise ValueError(
            f"scales {tuple(scales.shape)} do not match the packed {padded_n}x{padded_k}"
        )
    return padded_k // groups


def unpack_weight(
    packed: torch.Tensor,
    scales: torch.Tensor | None,
    size_n: int,
    size_k: int,
    out: torch.Tensor | None = None,
    block_n: int = DEFAULT_BLOCK_N,
    block_k: int = DEFAULT_BLOCK_K,
) -> torch.Tensor:
    """BF16 W[size_n, size_k] from a Marlin FP8 weight; scales=None leaves the FP8 values unscaled.

    ``out`` may be any contiguous BF16 buffer with at least size_n * size_k elements (a scratch
    buffer); the result is a view of its start.
    """
    if block_k % 16 or block_k < 16:
        raise ValueError(f"block_k must be a multiple of 16, got {block_k}")
    k_per_group = _check(packed, scales, size_n, size_k)
    padded_n, _ = layout.marlin_repacked_nk(packed)
    if out is None:
        out = torch.empty(size_n * size_k, dtype=torch.bfloat16, device=packed.device)
    elif out.dtype != torch.bfloat16 or not out.is_contiguous() or out.numel() < size_n * size_k:
        raise ValueError(
            f"out must be a contiguous bfloat16 buffer of >= {size_n * size_k} elements"
        )
    weight = out.view(-1)[: size_n * size_k].view(size_n, size_k)
    grouped = scales is not None and scales.shape[0] > 1
    grid = (triton.cdiv(size_n, block_n), triton.cdiv(size_k, block_k))
    _unpack_kernel[grid](
        packed,
        packed if scales is None else scales.view(torch.int16),
        weight.view(torch.int16),
        size_n,
        size_k,
        packed.shape[1],
        padded_n,
        max(k_per_group, 1),
        size_k,
        HAS_SCALES=scales is not None,
        GROUPED=grouped,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
    )
    return weight
