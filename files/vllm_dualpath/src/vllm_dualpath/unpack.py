"""One-pass Triton unpack: Marlin-packed FP8 weight (+ permuted scales) -> BF16 W[n, k] row-major.

Bit-exact with Marlin's own dequantization (``decode`` says how, on the GPU and on the CPU
interpreter alike); stores are row-major and contiguous.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from vllm_dualpath import decode, layout

# 16-row tiles of the Marlin layout one program unpacks (one 64-channel column of tiles) and its
# warps: the fastest pair on an H200 (docs/perf/dualpath-h200.md).
DEFAULT_K_TILES = 4
DEFAULT_NUM_WARPS = 4


@triton.jit  # type: ignore[untyped-decorator]
def _unpack_kernel(  # type: ignore[no-untyped-def]
    packed_ptr,
    scales_ptr,
    out_ptr,
    size_n,
    row_items,
    k_tiles,
    words_per_row,
    padded_n,
    k_per_group,
    HAS_SCALES: tl.constexpr,
    GROUPED: tl.constexpr,
    CHECK_SCALES: tl.constexpr,
    STORE_PAIRS: tl.constexpr,
    K_TILES: tl.constexpr,
):
    # A program: K_TILES 16x64 tiles of one column of tiles.
    tile_n = tl.program_id(0)
    block_k = tl.program_id(1)
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
        HAS_SCALES,
        GROUPED,
        CHECK_SCALES,
        K_TILES,
    )
    out_n = tile_n * 64 + tl.arange(0, 64)[:, None]
    if STORE_PAIRS:
        pair_k = block_k * K_TILES * 8 + tl.arange(0, K_TILES * 8)[None, :]
        mask = (out_n < size_n) & (pair_k < row_items)
        tl.store(out_ptr + out_n * row_items + pair_k, pairs, mask=mask)
    else:
        halves = tl.join(pairs & 0xFFFF, pairs >> 16).to(tl.int16)
        out_k = block_k * K_TILES * 16 + tl.arange(0, K_TILES * 16)[None, :]
        tile = tl.reshape(halves, (64, K_TILES * 16))
        mask = (out_n < size_n) & (out_k < row_items)
        tl.store(out_ptr + out_n * row_items + out_k, tile, mask=mask)


def check_packed(
    packed: torch.Tensor, scales: torch.Tensor | None, size_n: int, size_k: int
) -> int:
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
    if groups > 1 and (padded_k // groups) % layout.TILE:
        raise ValueError(f"scale groups of {padded_k // groups} K rows are not whole 16-row tiles")
    return padded_k // groups


def unpack_weight(
    packed: torch.Tensor,
    scales: torch.Tensor | None,
    size_n: int,
    size_k: int,
    out: torch.Tensor | None = None,
    k_tiles: int = DEFAULT_K_TILES,
    num_warps: int = DEFAULT_NUM_WARPS,
) -> torch.Tensor:
    """BF16 W[size_n, size_k] from a Marlin FP8 weight; scales=None leaves the FP8 values unscaled.

    ``out`` may be any contiguous BF16 buffer with at least size_n * size_k elements (a scratch
    buffer); the result is a view of its start. ``k_tiles`` (16-row tiles per block, a power of
    two) and ``num_warps`` change the speed, never the result.
    """
    if k_tiles < 1 or k_tiles & (k_tiles - 1):
        raise ValueError(f"k_tiles must be a power of two, got {k_tiles}")
    k_per_group = check_packed(packed, scales, size_n, size_k)
    padded_n, _ = layout.marlin_repacked_nk(packed)
    if out is None:
        out = torch.empty(size_n * size_k, dtype=torch.bfloat16, device=packed.device)
    elif out.dtype != torch.bfloat16 or not out.is_contiguous() or out.numel() < size_n * size_k:
        raise ValueError(
            f"out must be a contiguous bfloat16 buffer of >= {size_n * size_k} elements"
        )
    weight = out.view(-1)[: size_n * size_k].view(size_n, size_k)
    # Whole rows of BF16 pairs are stored as int32 when every row starts 4-byte aligned.
    store_pairs = size_k % 2 == 0 and weight.data_ptr() % 4 == 0
    # Plain integer ceilings: triton.cdiv is a JIT function, slow to call from the host.
    k_tile_count = -(-size_k // layout.TILE)
    blocks_k = -(-k_tile_count // k_tiles)
    blocks_n = -(-size_n // layout.MIN_THREAD_N)
    ordinary = None if scales is None else decode.scales_are_ordinary(scales)
    _unpack_kernel[(blocks_n, blocks_k)](
        packed,
        packed if scales is None else scales.view(torch.int16),
        weight.view(torch.int32) if store_pairs else weight.view(torch.int16),
        size_n,
        size_k // 2 if store_pairs else size_k,  # int32 pairs or int16 halves per output row
        k_tile_count,
        packed.shape[1],
        padded_n,
        max(k_per_group, 1),
        HAS_SCALES=scales is not None,
        GROUPED=scales is not None and scales.shape[0] > 1,
        CHECK_SCALES=ordinary is not True,
        STORE_PAIRS=store_pairs,
        K_TILES=k_tiles,
        num_warps=num_warps,
    )
    return weight
