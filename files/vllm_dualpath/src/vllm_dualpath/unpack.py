"""One-pass Triton unpack: Marlin-packed FP8 weight (+ permuted scales) -> BF16 W[n, k] row-major.

Bit-exact with Marlin's own dequantization (``decode`` says how, on the GPU and on the CPU
interpreter alike); stores are row-major and contiguous.
"""

from __future__ import annotations

from collections.abc import Callable

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


# Launches seen before, by everything that decides their arguments: a known key means the same
# arguments, so the same compiled kernel, launched again without Triton's per-call dispatch
# (binding, specialization and cache lookup, most of the host time of a launch; vLLM calls the
# op for every layer of every prefill pass). Pointers are kept as integers, so no tensor is held.
_known_launches: dict[tuple[object, ...], tuple[Callable[..., object], tuple[object, ...]]] = {}
_MAX_KNOWN_LAUNCHES = 4096
_direct_launch_works = True


def _launch_key(
    packed: torch.Tensor,
    scales: torch.Tensor | None,
    size_n: int,
    size_k: int,
    out: torch.Tensor,
    k_tiles: int,
    num_warps: int,
) -> tuple[object, ...]:
    scale_key = None
    if scales is not None:
        verdict = decode.scales_are_ordinary(scales)
        scale_key = (scales.data_ptr(), scales.shape, scales.dtype, scales.is_contiguous(), verdict)
    return (
        packed.data_ptr(),
        packed.shape,
        packed.dtype,
        packed.is_contiguous(),
        scale_key,
        out.data_ptr(),
        out.numel(),
        out.dtype,
        out.is_contiguous(),
        size_n,
        size_k,
        k_tiles,
        num_warps,
    )


def launches_known() -> int:
    """How many launches a call with the same arguments repeats directly (tests)."""
    return len(_known_launches)


def unpack_weight(
    packed: torch.Tensor,
    scales: torch.Tensor | None,
    size_n: int,
    size_k: int,
    out: torch.Tensor | None = None,
    k_tiles: int = DEFAULT_K_TILES,
    num_warps: int = DEFAULT_NUM_WARPS,
    direct: bool = True,
) -> torch.Tensor:
    """BF16 W[size_n, size_k] from a Marlin FP8 weight; scales=None leaves the FP8 values unscaled.

    ``out`` may be any contiguous BF16 buffer with at least size_n * size_k elements (a scratch
    buffer); the result is a view of its start. ``k_tiles`` (16-row tiles per block, a power of
    two) and ``num_warps`` change the speed, never the result. On the GPU, a call into ``out``
    with the arguments of an earlier one repeats that launch directly, unless ``direct`` is
    False (benchmarks: Triton's dispatch every time).
    """
    global _direct_launch_works
    key = None
    if direct and out is not None and packed.is_cuda and _direct_launch_works:
        key = _launch_key(packed, scales, size_n, size_k, out, k_tiles, num_warps)
        known = _known_launches.get(key)
        if known is not None:
            launch, arguments = known
            try:
                launch(*arguments)
                return out.as_strided((size_n, size_k), (size_k, 1))
            except (TypeError, IndexError, ValueError):
                # This Triton launches compiled kernels differently: its dispatch serves all.
                _direct_launch_works = False
                _known_launches.clear()
                key = None
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
    weight = out.as_strided((size_n, size_k), (size_k, 1))
    # Whole rows of BF16 pairs are stored as int32 when every row starts 4-byte aligned.
    store_pairs = size_k % 2 == 0 and weight.data_ptr() % 4 == 0
    # Plain integer ceilings: triton.cdiv is a JIT function, slow to call from the host.
    k_tile_count = -(-size_k // layout.TILE)
    grid = (-(-size_n // layout.MIN_THREAD_N), -(-k_tile_count // k_tiles), 1)
    ordinary = None if scales is None else decode.scales_are_ordinary(scales)
    tensors = (
        packed,
        packed if scales is None else scales.view(torch.int16),
        weight.view(torch.int32) if store_pairs else weight.view(torch.int16),
    )
    values = (
        size_n,
        size_k // 2 if store_pairs else size_k,  # int32 pairs or int16 halves per output row
        k_tile_count,
        packed.shape[1],
        padded_n,
        max(k_per_group, 1),
    )
    constants = {
        "HAS_SCALES": scales is not None,
        "GROUPED": scales is not None and scales.shape[0] > 1,
        "CHECK_SCALES": ordinary is not True,
        "STORE_PAIRS": store_pairs,
        "K_TILES": k_tiles,
    }
    compiled = _unpack_kernel[grid](*tensors, *values, **constants, num_warps=num_warps)
    if key is not None:
        if len(_known_launches) >= _MAX_KNOWN_LAUNCHES:
            _known_launches.clear()
        pointers = tuple(t.data_ptr() for t in tensors)
        _known_launches[key] = (compiled[grid], (*pointers, *values, *constants.values()))
    return weight
