"""Fused W8A16 GEMM: x @ W.T with W decoded from the Marlin FP8 layout inside the K loop.

One launch, no unpacked copy of the weight and no scratch: each program decodes the weight
block it needs (``decode.decoded_pairs``, the unpack's own bits) and feeds it to the tensor
cores next to the activations, so the weight is read as 1 byte per element instead of the
2-byte read of a BF16 GEMM plus the unpack's 3 bytes.

Results follow ``op.linear_on_unpacked`` step for step (group-wise scales folded into the
weight, channel-wise scales either folded or applied to the fp32 accumulator, then one rounding
to BF16, then the bias); only the order of the fp32 sums differs from cuBLAS.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from vllm_dualpath import decode, layout, unpack

# Stored scales carry Marlin's 2**120 (``layout.BF16_EXPONENT_BIAS``); the epilogue takes it out.
_UNBIAS: tl.constexpr = tl.constexpr(2.0**-layout.BF16_EXPONENT_BIAS_LOG2)


@dataclass(frozen=True)
class Tiling:
    """A launch shape: output block_m x (64 * n_tiles), K steps of 16 * k_tiles."""

    block_m: int
    n_tiles: int
    k_tiles: int
    num_warps: int
    num_stages: int
    group_m: int = 8
    weight_left: bool = False  # weight as the left operand (registers), activations right
    # Un-shuffle the weight block in registers (``decode.decoded_pairs``) for one dot per K
    # step, instead of four byte-plane dots on the words as stored.
    unshuffle: bool = False


# By the largest M each serves; the last serves every larger M.
TILINGS: tuple[tuple[int, Tiling], ...] = (
    (64, Tiling(64, 2, 4, 4, 3)),
    (1 << 62, Tiling(128, 2, 8, 8, 3)),
)


def tiling_for(m: int) -> Tiling:
    return next(tiling for largest, tiling in TILINGS if m <= largest)


@triton.jit
def _code_times_scale(codes, scale, INTERPRETED: tl.constexpr):  # type: ignore[no-untyped-def]
    """BF16 of FP8 e4m3 codes (int32, 0..255) x stored scales (fp32): Marlin's weight values.

    The code's bits shifted into fp32 position read as value x 2**-120 exactly (subnormals
    included; the NaN codes read as +-480 x 2**-120, as in Marlin), the stored scale carries the
    2**120 back, and for an ordinary scale the fp32 product is exact: one rounding, to BF16,
    to nearest even (on integer bits under the interpreter, whose casts truncate).
    """
    bits = ((codes & 0x7F) << 20) | ((codes & 0x80) << 24)
    product = bits.to(tl.float32, bitcast=True) * scale
    if INTERPRETED:
        exact = product.to(tl.int32, bitcast=True)
        rounded = (exact + 0x7FFF + ((exact >> 16) & 1)) & -65536
        return rounded.to(tl.float32, bitcast=True).to(tl.bfloat16)
    return product.to(tl.bfloat16)


@triton.jit
def _halves(pairs):  # type: ignore[no-untyped-def]
    """(even, odd) BF16 columns of a tile of int32 pairs of BF16 activations."""
    low = (pairs << 16).to(tl.float32, bitcast=True).to(tl.bfloat16)
    high = (pairs & -65536).to(tl.float32, bitcast=True).to(tl.bfloat16)
    return low, high


@triton.jit
def _byte_plane(  # type: ignore[no-untyped-def]
    accumulator,
    x,
    words,
    SHIFT: tl.constexpr,
    scale,
    WEIGHT_LEFT: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    """accumulator + x @ (the weights in byte SHIFT / 8 of each word)."""
    weight = _code_times_scale((words >> SHIFT) & 0xFF, scale, INTERPRETED)
    if INTERPRETED:
        # The interpreter multiplies BF16 dot operands as their raw 16-bit patterns; fp32
        # holds every BF16 value exactly.
        x = x.to(tl.float32)
        weight = weight.to(tl.float32)
    if WEIGHT_LEFT:
        return tl.dot(tl.trans(weight), tl.trans(x), accumulator)
    return tl.dot(x, weight, accumulator)


@triton.jit
def _unshuffled_steps(  # type: ignore[no-untyped-def]
    accumulator,
    x_ptr,
    packed_ptr,
    scales_ptr,
    rows,
    tile_n,
    m,
    size_n,
    pairs_per_row,
    k_tiles,
    words_per_row,
    padded_n,
    k_per_group,
    FOLD_SCALES: tl.constexpr,
    GROUPED: tl.constexpr,
    BLOCK_M: tl.constexpr,
    N_TILES: tl.constexpr,
    K_TILES: tl.constexpr,
    WEIGHT_LEFT: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    """The K loop with the weight block un-shuffled in registers: one dot per step."""
    block_k_size: tl.constexpr = K_TILES * 16
    for block_k in range(0, tl.cdiv(k_tiles, K_TILES)):
        pairs = decode.decoded_pairs(
            packed_ptr,
            scales_ptr,
            tile_n,
            block_k,
            size_n,
            k_tiles,
            words_per_row,
            padded_n,
            k_per_group,
            FOLD_SCALES,
            GROUPED,
            False,
            N_TILES,
            K_TILES,
        )
        low, high = _halves(pairs)
        weight = tl.reshape(tl.join(low, high), (N_TILES * 64, block_k_size))
        pair = block_k * K_TILES * 8 + tl.arange(0, K_TILES * 8)[None, :]
        x_pairs = tl.load(
            x_ptr + rows * pairs_per_row + pair, mask=(rows < m) & (pair < pairs_per_row), other=0
        )
        x_low, x_high = _halves(x_pairs)
        x = tl.reshape(tl.join(x_low, x_high), (BLOCK_M, block_k_size))
        if INTERPRETED:
            x = x.to(tl.float32)
            weight = weight.to(tl.float32)
        if WEIGHT_LEFT:
            accumulator = tl.dot(weight, tl.trans(x), accumulator)
        else:
            accumulator = tl.dot(x, tl.trans(weight), accumulator)
    return accumulator


@triton.jit  # type: ignore[untyped-decorator]
def _fused_kernel(  # type: ignore[no-untyped-def]
    x_ptr,
    packed_ptr,
    scales_ptr,
    bias_ptr,
    out_ptr,
    m,
    size_n,
    pairs_per_row,
    k_tiles,
    words_per_row,
    padded_n,
    k_per_group,
    FOLD_SCALES: tl.constexpr,
    GROUPED: tl.constexpr,
    CHANNEL_EPILOGUE: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    N_TILES: tl.constexpr,
    K_TILES: tl.constexpr,
    GROUP_M: tl.constexpr,
    WEIGHT_LEFT: tl.constexpr,
    UNSHUFFLE: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    # Without UNSHUFFLE the weight is never un-shuffled. Word 32a + 8t + 2w + r of a 16x64 tile
    # holds channel 16w + 8r + a, K rows 2t + {0, 8, 1, 9} in bytes 0..3. So a K step is four
    # GEMMs, one per byte: rows (tile, t) of words, columns in memory order (8a + 2w + r),
    # against the activations of exactly those K rows, which are the low or high halves of the
    # int32 pairs 8 * tile + t (bytes 0, 2) and 8 * tile + 4 + t (bytes 1, 3). Output columns
    # are put back in channel order only when stored.
    block_n_size: tl.constexpr = N_TILES * 64
    step_rows: tl.constexpr = K_TILES * 4
    # GROUP_M row blocks walk the column blocks together, so each weight block is read from
    # memory once per group and from L2 by the rest.
    pid = tl.program_id(0)
    blocks_m = tl.cdiv(m, BLOCK_M)
    blocks_n = tl.cdiv(size_n, block_n_size)
    per_group = GROUP_M * blocks_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = tl.minimum(blocks_m - first_m, GROUP_M)
    block_m = first_m + (pid % per_group) % group_rows
    block_n = (pid % per_group) // group_rows

    rows = block_m * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    step = tl.arange(0, step_rows)  # (tile, t) of one K step
    step_tile = step // 4
    step_t = step % 4
    column = tl.arange(0, block_n_size)  # memory order inside the block of tiles
    word_column = block_n * N_TILES * 256 + (column // 64) * 256 + 32 * ((column % 64) // 8)
    word_column += column % 8
    n = block_n * block_n_size + (column // 64) * 64 + 8 * (column % 8) + (column % 64) // 8
    in_n = n < size_n
    if FOLD_SCALES:
        # Group-wise scales are stored in exactly this memory order (an 8x8 transpose).
        scale_column = block_n * block_n_size + column if GROUPED else decode.scale_column(n, False)

    if WEIGHT_LEFT:
        accumulator = tl.zeros((block_n_size, BLOCK_M), dtype=tl.float32)
    else:
        accumulator = tl.zeros((BLOCK_M, block_n_size), dtype=tl.float32)
    if UNSHUFFLE:
        n = block_n * block_n_size + tl.arange(0, block_n_size)
        in_n = n < size_n
        accumulator = _unshuffled_steps(
            accumulator,
            x_ptr,
            packed_ptr,
            scales_ptr,
            rows,
            block_n * N_TILES,
            m,
            size_n,
            pairs_per_row,
            k_tiles,
            words_per_row,
            padded_n,
            k_per_group,
            FOLD_SCALES,
            GROUPED,
            BLOCK_M,
            N_TILES,
            K_TILES,
            WEIGHT_LEFT,
            INTERPRETED,
        )
    else:
        for block_k in range(0, tl.cdiv(k_tiles, K_TILES)):
            tile = block_k * K_TILES + step_tile
            words = tl.load(
                packed_ptr + (tile * words_per_row + 8 * step_t)[:, None] + word_column[None, :],
                mask=(tile < k_tiles)[:, None],
                other=0,
            )
            if FOLD_SCALES:
                # The host keeps a K step inside one scale group.
                group = (block_k * K_TILES * 16) // k_per_group if GROUPED else 0
                stored = tl.load(scales_ptr + group * padded_n + scale_column, mask=in_n, other=0)
                scale = (stored.to(tl.int32) << 16).to(tl.float32, bitcast=True)[None, :]
            else:
                scale = 1.329227995784916e36  # 2**120: the unscaled FP8 values
            pair = 8 * tile + step_t
            in_k = (rows < m) & (pair < pairs_per_row)[None, :]
            first = tl.load(x_ptr + rows * pairs_per_row + pair[None, :], mask=in_k, other=0)
            in_k = (rows < m) & (pair + 4 < pairs_per_row)[None, :]
            second = tl.load(x_ptr + rows * pairs_per_row + 4 + pair[None, :], mask=in_k, other=0)
            x0, x2 = _halves(first)
            x1, x3 = _halves(second)
            accumulator = _byte_plane(accumulator, x0, words, 0, scale, WEIGHT_LEFT, INTERPRETED)
            accumulator = _byte_plane(accumulator, x1, words, 8, scale, WEIGHT_LEFT, INTERPRETED)
            accumulator = _byte_plane(accumulator, x2, words, 16, scale, WEIGHT_LEFT, INTERPRETED)
            accumulator = _byte_plane(accumulator, x3, words, 24, scale, WEIGHT_LEFT, INTERPRETED)
    if WEIGHT_LEFT:
        accumulator = tl.trans(accumulator)

    if CHANNEL_EPILOGUE:
        stored = tl.load(scales_ptr + decode.scale_column(n, False), mask=in_n, other=0)
        channel = (stored.to(tl.int32) << 16).to(tl.float32, bitcast=True) * _UNBIAS
        accumulator = accumulator * channel[None, :]
    output = accumulator.to(tl.bfloat16)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + decode.scale_column(n, False), mask=in_n, other=0.0)
        output = (output.to(tl.float32) + bias.to(tl.float32)[None, :]).to(tl.bfloat16)
    tl.store(out_ptr + rows * size_n + n[None, :], output, mask=(rows < m) & in_n[None, :])


def supported(x: torch.Tensor, fold_scales: torch.Tensor | None) -> bool:
    """Whether the fused GEMM can take this call: activations it reads as int32 pairs (an even
    K, 4-byte aligned), and scales it folds in all ordinary, and known to be (a weight first met
    inside graph capture cannot be checked there)."""
    if x.shape[-1] % 2 or x.data_ptr() % 4:
        return False
    return fold_scales is None or decode.scales_are_ordinary(fold_scales) is True


def fused_linear(
    x: torch.Tensor,
    packed: torch.Tensor,
    fold_scales: torch.Tensor | None,
    channel_scales: torch.Tensor | None,
    bias: torch.Tensor | None,
    size_n: int,
    size_k: int,
    tiling: Tiling | None = None,
) -> torch.Tensor:
    """x[M, size_k] @ W.T (+ bias) -> BF16 [M, size_n], W decoded from the Marlin layout.

    ``fold_scales`` (permuted, as Marlin stores them) multiply the weight before the GEMM;
    ``channel_scales`` (a [1, padded_n] row, permuted) multiply the fp32 accumulator; give at
    most one. ``bias`` is Marlin's permuted [padded_n] bias. ``tiling`` changes the speed and
    the order of the fp32 sums, nothing else.
    """
    if fold_scales is not None and channel_scales is not None:
        raise ValueError("give fold_scales or channel_scales, not both")
    if x.dtype != torch.bfloat16 or x.dim() != 2 or not x.is_contiguous():
        raise ValueError("x must be a contiguous 2-D bfloat16 tensor")
    if x.shape[1] != size_k:
        raise ValueError(f"x has {x.shape[1]} columns, the weight {size_k} K rows")
    if not supported(x, fold_scales):
        raise ValueError(
            "the fused GEMM needs an even K, 4-byte aligned activations and ordinary scales "
            "(no tiny, infinite or NaN ones): unpack this weight instead"
        )
    k_per_group = unpack.check_packed(packed, fold_scales, size_n, size_k)
    padded_n, _ = layout.marlin_repacked_nk(packed)
    for name, row in (("channel_scales", channel_scales), ("bias", bias)):
        if row is not None and (row.dtype != torch.bfloat16 or row.numel() != padded_n):
            raise ValueError(f"{name} must hold {padded_n} bfloat16 values")
    tiling = tiling or tiling_for(x.shape[0])
    k_tiles = tiling.k_tiles
    grouped = fold_scales is not None and fold_scales.shape[0] > 1
    while grouped and k_per_group % (layout.TILE * k_tiles):
        k_tiles //= 2  # a K step must stay inside one scale group
    m = x.shape[0]
    out = torch.empty((m, size_n), dtype=torch.bfloat16, device=x.device)
    if m == 0:
        return out
    block_n = 64 * tiling.n_tiles
    grid = (-(-m // tiling.block_m) * -(-size_n // block_n),)
    scales = fold_scales if fold_scales is not None else channel_scales
    _fused_kernel[grid](
        x.view(torch.int32),
        packed,
        packed if scales is None else scales.view(torch.int16),
        packed if bias is None else bias,
        out,
        m,
        size_n,
        size_k // 2,
        -(-size_k // layout.TILE),  # tiles past size_k hold only padding
        packed.shape[1],
        padded_n,
        max(k_per_group, 1),
        FOLD_SCALES=fold_scales is not None,
        GROUPED=grouped,
        CHANNEL_EPILOGUE=channel_scales is not None,
        HAS_BIAS=bias is not None,
        BLOCK_M=tiling.block_m,
        N_TILES=tiling.n_tiles,
        K_TILES=k_tiles,
        GROUP_M=tiling.group_m,
        WEIGHT_LEFT=tiling.weight_left,
        UNSHUFFLE=tiling.unshuffle,
        INTERPRETED=os.environ.get("TRITON_INTERPRET") == "1",
        num_warps=tiling.num_warps,
        num_stages=tiling.num_stages,
    )
    return out
