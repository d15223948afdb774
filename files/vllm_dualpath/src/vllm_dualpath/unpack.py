"""One-pass Triton unpack: Marlin-packed FP8 weight (+ permuted scales) -> BF16 W[n, k] row-major.

Each element is FP8 value x true scale, rounded to BF16 once (nearest even) on integer bits, so
the GPU and Triton's CPU interpreter (whose float -> bf16 casts truncate) give the same bits; the
compiled kernel keeps fp32 subnormals (no flush-to-zero). Why that is exact: the package README,
"The unpack"; the index math this inverts: ``layout``.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch
import triton
import triton.language as tl

from vllm_dualpath import layout

# Per program: 16-row tiles of one 64-channel column, and warps; and whether neighbouring
# programs take neighbouring K blocks (else neighbouring columns). They set the speed, never
# the bits (the choice: docs/perf/unpack-bandwidth-h100.md).
DEFAULT_K_TILES = 8
DEFAULT_NUM_WARPS = 4
DEFAULT_K_FASTEST = True


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
def _scale_columns(n, GROUPED: tl.constexpr):  # type: ignore[no-untyped-def]
    """Column of channel n in the permuted scale rows (see ``layout.permute_scales``)."""
    if GROUPED:
        # Group-wise scales: an 8x8 transpose inside every block of 64 channels.
        c = n & 63
        return (n - c) + 8 * (c & 7) + (c >> 3)
    # Channel-wise scales: blocks of 32, position 8i + 2a + b holds channel 8a + 2i + b.
    c = n & 31
    return (n - c) + 8 * ((c & 7) >> 1) + 2 * (c >> 3) + (c & 1)


@triton.jit
def _scaled_pair(pair_codes, scale_bits, HAS_SCALES: tl.constexpr):  # type: ignore[no-untyped-def]
    """Two BF16 results packed in an int32 from two e4m3 codes in bytes 0 and 2 of pair_codes,
    for ordinary scales: Marlin's shift decode (value x 2**-120, NaN codes as +-480), an exact
    fp32 product with the stored scale, then rounding to BF16 on integer bits."""
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
def _rare_pair(pair_codes, scale_bits):  # type: ignore[no-untyped-def]
    """``_scaled_pair`` for any scale (tiny, infinite, NaN), on integers alone."""
    low = _scaled_bits_on_integers(pair_codes & 0xFF, scale_bits)
    high = _scaled_bits_on_integers((pair_codes >> 16) & 0xFF, scale_bits)
    return (low & 0xFFFF) | (high << 16)


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
    ONE_SCALE_ROW: tl.constexpr,
    K_FASTEST: tl.constexpr,
):
    # A program: K_TILES 16x64 tiles of one column of tiles, each 256 consecutive words, read
    # with plain contiguous loads. Word 32a + 8t + 2w + r of tile kt holds channel 16w + 8r + a
    # of the tile, K rows 16kt + 2t + {0, 1} in bytes {0, 2} and 16kt + 8 + 2t + {0, 1} in
    # bytes {1, 3}: each byte pair is two neighbouring BF16 results. The block is un-shuffled
    # in registers (permute), so the stores are row-major and contiguous.
    if K_FASTEST:
        tile_n = tl.program_id(1)
        block_k = tl.program_id(0)
    else:
        tile_n = tl.program_id(0)
        block_k = tl.program_id(1)
    tile_rows = block_k * K_TILES + tl.arange(0, K_TILES)[:, None]
    flat = tl.load(
        packed_ptr + tile_rows * words_per_row + tile_n * 256 + tl.arange(0, 256)[None, :],
        mask=tile_rows < k_tiles,
        other=0,
    )
    words = tl.reshape(flat, (K_TILES, 8, 4, 4, 2))
    kt = block_k * K_TILES + tl.arange(0, K_TILES)[:, None, None, None, None]
    a = tl.arange(0, 8)[None, :, None, None, None]
    w = tl.arange(0, 4)[None, None, None, :, None]
    r = tl.arange(0, 2)[None, None, None, None, :]
    n = tile_n * 64 + 16 * w + 8 * r + a
    low_codes = words & 0x00FF00FF
    high_codes = (words >> 8) & 0x00FF00FF

    if HAS_SCALES:
        columns = _scale_columns(n, GROUPED)
        if ONE_SCALE_ROW:
            # All tiles of the program share one row of scales (channel-wise, or groups of a
            # multiple of K_TILES tiles): its 64 scales are loaded once, for every tile.
            if GROUPED:
                columns += (block_k * K_TILES * 16 // k_per_group) * padded_n
            scale_mask = n < size_n
        else:
            if GROUPED:
                # k_per_group is a multiple of 16 (checked by the caller): one group per tile row.
                columns += (kt * 16 // k_per_group) * padded_n
            scale_mask = (kt < k_tiles) & (n < size_n)
        scale_bits = tl.load(scales_ptr + columns, mask=scale_mask, other=0).to(tl.int32)
        scale_bits = scale_bits & 0xFFFF
        rare = 0
        if CHECK_SCALES:
            # Ordinary scales (true scale >= 2**-117, finite, or zero) keep the fp32 product
            # exact and normal; a block holding any other takes the integer path. A block-wide
            # reduction: the host skips it for weights it checked once (_scales_are_ordinary).
            scale_exp = (scale_bits >> 7) & 255
            odd = ((scale_exp < 130) & ((scale_bits & 0x7FFF) != 0)) | (scale_exp == 255)
            rare = tl.max((odd & scale_mask).to(tl.int32))
        if rare > 0:
            low = _rare_pair(low_codes, scale_bits)
            high = _rare_pair(high_codes, scale_bits)
        else:
            low = _scaled_pair(low_codes, scale_bits, True)
            high = _scaled_pair(high_codes, scale_bits, True)
    else:
        low = _scaled_pair(low_codes, 0, False)
        high = _scaled_pair(high_codes, 0, False)

    # Axes (kt, a, t, w, r, half) -> (w, r, a | kt, half, t): rows n, columns K pairs in order.
    pairs = tl.permute(tl.join(low, high), (3, 4, 1, 0, 5, 2))
    out_n = tile_n * 64 + tl.arange(0, 64)[:, None]
    if STORE_PAIRS:
        pair_k = block_k * K_TILES * 8 + tl.arange(0, K_TILES * 8)[None, :]
        tile = tl.reshape(pairs, (64, K_TILES * 8))
        mask = (out_n < size_n) & (pair_k < row_items)
        tl.store(out_ptr + out_n * row_items + pair_k, tile, mask=mask)
    else:
        halves = tl.join(pairs & 0xFFFF, pairs >> 16).to(tl.int16)
        out_k = block_k * K_TILES * 16 + tl.arange(0, K_TILES * 16)[None, :]
        tile = tl.reshape(halves, (64, K_TILES * 16))
        mask = (out_n < size_n) & (out_k < row_items)
        tl.store(out_ptr + out_n * row_items + out_k, tile, mask=mask)


# Per scale tensor address: (the tensor, its version, its verdict). The weak reference and the
# version make a verdict die with its tensor and with any in-place change; one entry per address.
_ordinary: dict[int, tuple[weakref.ref[torch.Tensor], int, bool]] = {}


def tensor_version(tensor: torch.Tensor) -> int | None:
    """The tensor's version counter (it counts in-place changes), or None for an inference
    tensor, which keeps none (one made under ``torch.inference_mode``)."""
    return None if tensor.is_inference() else tensor._version


def _scales_are_ordinary(scales: torch.Tensor) -> bool | None:
    """True when every stored scale is ordinary (see the kernel), once per weight version;
    None when unknown: first seen while a CUDA graph is captured (no host sync allowed), or an
    inference tensor, whose changes nothing counts (the kernel then checks every call)."""
    version = tensor_version(scales)
    if version is None:
        return None
    known = _ordinary.get(scales.data_ptr())
    if known is not None and known[0]() is scales and known[1] == version:
        return known[2]
    if scales.is_cuda and torch.cuda.is_current_stream_capturing():
        return None
    bits = scales.view(torch.int16).to(torch.int32) & 0xFFFF
    exponent = (bits >> 7) & 255
    odd = ((exponent < 130) & ((bits & 0x7FFF) != 0)) | (exponent == 255)
    verdict = not bool(odd.any())
    _ordinary[scales.data_ptr()] = (weakref.ref(scales), version, verdict)
    return verdict


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
    if groups > 1 and (padded_k // groups) % layout.TILE:
        raise ValueError(f"scale groups of {padded_k // groups} K rows are not whole 16-row tiles")
    return padded_k // groups


# Launches by everything that decides their arguments: a known key repeats the compiled kernel
# without Triton's per-call dispatch, most of a launch's host time. Pointers are kept as integers,
# so no tensor is held.
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
    k_fastest: bool = DEFAULT_K_FASTEST,
) -> tuple[object, ...]:
    scale_key = None
    if scales is not None:
        verdict = _scales_are_ordinary(scales)
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
        k_fastest,
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
    k_fastest: bool = DEFAULT_K_FASTEST,
) -> torch.Tensor:
    """BF16 W[size_n, size_k] from a Marlin FP8 weight; scales=None leaves the FP8 values unscaled.

    The result is a view of the start of ``out`` (any contiguous BF16 buffer of at least
    size_n * size_k elements) when given. ``k_tiles`` (a power of two), ``num_warps`` and
    ``k_fastest`` (the grid's order) change the speed, never the result. On the GPU, a call
    into ``out`` with an earlier call's arguments repeats its launch directly, unless ``direct``
    is False.
    """
    global _direct_launch_works
    key = None
    if direct and out is not None and packed.is_cuda and _direct_launch_works:
        key = _launch_key(packed, scales, size_n, size_k, out, k_tiles, num_warps, k_fastest)
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
    k_per_group = _check(packed, scales, size_n, size_k)
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
    if k_fastest:
        grid = (grid[1], grid[0], 1)
    ordinary = None if scales is None else _scales_are_ordinary(scales)
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
        "ONE_SCALE_ROW": scales is not None
        and (scales.shape[0] == 1 or k_per_group % (layout.TILE * k_tiles) == 0),
        "K_FASTEST": k_fastest,
    }
    compiled = _unpack_kernel[grid](*tensors, *values, **constants, num_warps=num_warps)
    if key is not None:
        if len(_known_launches) >= _MAX_KNOWN_LAUNCHES:
            _known_launches.clear()
        pointers = tuple(t.data_ptr() for t in tensors)
        _known_launches[key] = (compiled[grid], (*pointers, *values, *constants.values()))
    return weight
