"""A warp-specialized W8A16 GEMM: one warpgroup decodes the Marlin FP8 weight into shared
memory while two warpgroups run the tensor cores on it, timed beside BF16 cuBLAS and the
overlay's unpack + cuBLAS on one Hopper GPU.

    export VLLM_DUALPATH_MARLIN_LIB=build/marlin/libvllm_marlin_fp8.so
    export PYTHONPATH=files/vllm_dualpath/src:files/vllm_dualpath/benchmarks
    python3 research/warp_specialized_gemm.py \\
        --out OUT/warp-specialized-gemm.json --png OUT/warp-specialized-gemm.png

Needs a Hopper GPU, Triton's Gluon (Triton 3.6) and the Marlin library. Checked against FP32
before timing (``fused_gemm_bench``). Design and results:
research/results/warp-specialized-gemm-h200.md.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import fused_gemm_bench
import torch
import triton
from marlin_fp8_pairs import doubled_scales, scaled_pairs
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

BLOCK_TOKENS = 256
BLOCK_CHANNELS = 128
BLOCK_K = 64  # four 16-row Marlin tiles per K step
GROUP_K = 128  # the block scales' K group: two steps
WORD_STAGES = 2  # the decoder's TMA ring for words and scales: one slot per step of a pair
STAGE_CONFIGS = (4, 3)  # shared-memory stages (four is the most that fits)
# setmaxnreg budgets: 2 x 184 (MMA) + 136 (decoder) = 3 x the launch's 168
LAUNCH_REGS, MMA_REGS, DECODE_REGS = 168, 184, 136


@gluon.constexpr_function  # type: ignore[untyped-decorator]
def _word_rows_layout() -> gl.DistributedLinearLayout:
    """Words [kt, 8 nb + a, 8t + j] of one K step for 128 channels, as the 128-byte-swizzled
    TMA box holds them (rows of 32 words). Lane 4a + t holds its 8 contiguous words j: eight
    consecutive lanes read 128 distinct bytes. Warps: the 64-channel block nb and kt's high bit."""
    return gl.DistributedLinearLayout(
        reg_bases=[[0, 0, 1], [0, 0, 2], [0, 0, 4], [1, 0, 0]],
        lane_bases=[[0, 0, 8], [0, 0, 16], [0, 1, 0], [0, 2, 0], [0, 4, 0]],
        warp_bases=[[0, 8, 0], [2, 0, 0]],
        block_bases=[],
        shape=[4, 16, 32],
    )


@gluon.constexpr_function  # type: ignore[untyped-decorator]
def _words_layout() -> gl.DistributedLinearLayout:
    """The same registers as [kt, nb, a, t, j]: word 32a + 8t + j of Marlin tile (kt, nb),
    which holds K rows 16kt + {2t, 2t + 1, 2t + 8, 2t + 9} of channel 64nb + 16(j >> 1) +
    8(j & 1) + a (see vllm_dualpath.layout)."""
    return gl.DistributedLinearLayout(
        reg_bases=[[0, 0, 0, 0, 1], [0, 0, 0, 0, 2], [0, 0, 0, 0, 4], [1, 0, 0, 0, 0]],
        lane_bases=[
            [0, 0, 0, 1, 0],
            [0, 0, 0, 2, 0],
            [0, 0, 1, 0, 0],
            [0, 0, 2, 0, 0],
            [0, 0, 4, 0, 0],
        ],
        warp_bases=[[0, 1, 0, 0, 0], [2, 0, 0, 0, 0]],
        block_bases=[],
        shape=[4, 2, 8, 4, 8],
    )


@gluon.jit
def _load_words(words_desc, scales_desc, words_smem, scales_smem, loaded, off_n, slot, step, pred):  # type: ignore[no-untyped-def]
    """Step ``step``'s words and its scale group's row into word slot ``slot`` by TMA."""
    bar = loaded.index(slot)
    nbytes: gl.constexpr = words_desc.block_type.nbytes + scales_desc.block_type.nbytes
    mbarrier.expect(bar, nbytes, pred=pred)
    tma.async_copy_global_to_shared(
        words_desc, [4 * step, off_n // 8, 0], bar, words_smem.index(slot), pred=pred
    )
    group_steps: gl.constexpr = 2  # GROUP_K // BLOCK_K
    tma.async_copy_global_to_shared(
        scales_desc, [step // group_steps, off_n], bar, scales_smem.index(slot), pred=pred
    )


@gluon.jit
def _decoded_tile(words, scales):  # type: ignore[no-untyped-def]
    """bf16x2 pairs [128 channels, 32] of one K step: pair column 8kt + 4h + t holds K rows
    16kt + 8h + 2t and + 1, the order of the stage's BF16 [128, 64] tile."""
    scale2 = gl.expand_dims(gl.expand_dims(doubled_scales(scales), 0), 3)  # [1, nb, a, 1, j]
    low, high = scaled_pairs(words, scale2)
    pairs = gl.join(low, high)  # [kt, nb, a, t, j, h]
    pairs = gl.reshape(pairs, [4, 2, 8, 4, 4, 2, 2])  # kt, nb, a, t, w, r, h (j = 2w + r)
    pairs = gl.permute(pairs, [1, 4, 5, 2, 0, 6, 3])  # nb, w, r, a, kt, h, t
    return gl.reshape(pairs, [128, 32])


@gluon.jit
def _read_words(words_smem, scales_smem, loaded, slot: gl.constexpr, use):  # type: ignore[no-untyped-def]
    """Word slot ``slot``'s words [kt, nb, a, t, j] and scales [nb, a, j] (the grouped scales'
    permuted order), once its TMA (the ``use``-th into the slot) has landed."""
    words_layout: gl.constexpr = _words_layout()
    scales_layout: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(3, words_layout))
    plain: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[2, 1, 0])
    mbarrier.wait(loaded.index(slot), use & 1)
    rows = words_smem.index(slot).load(_word_rows_layout())
    words = gl.convert_layout(gl.reshape(rows, [4, 2, 8, 4, 8]), words_layout, assert_trivial=True)
    scales = scales_smem.index(slot)._reinterpret(gl.bfloat16, [2, 8, 8], plain)
    return words, scales.load(scales_layout)


@gluon.jit
def _fill_stage(x_desc, x_smem, w_smem, ready, empty, off_m, tile, step, STAGES: gl.constexpr):  # type: ignore[no-untyped-def]
    """Once stage ``step % STAGES`` is free: its X tile by TMA and the decoded weight tile (the
    caller fences and arrives)."""
    pairs_layout: gl.constexpr = gl.NVMMASharedLayout(
        swizzle_byte_width=128, element_bitwidth=32, rank=2
    )
    stage = step % STAGES
    mbarrier.wait(empty.index(stage), ((step // STAGES) & 1) ^ 1)
    mbarrier.expect(ready.index(stage), x_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(
        x_desc, [off_m, step * x_desc.block_type.shape[1]], ready.index(stage), x_smem.index(stage)
    )
    w_smem.index(stage)._reinterpret(gl.int32, [128, 32], pairs_layout).store(tile)


@gluon.jit
def _decode_partition(  # type: ignore[no-untyped-def]
    x_desc,
    words_desc,
    scales_desc,
    k_steps,
    x_smem,
    w_smem,
    ready,
    empty,
    off_m,
    off_n,
    STAGES: gl.constexpr,
):
    """Fills stage ``step % STAGES`` for every step. Two steps at a time, one per word slot, so
    one step's decode overlaps the other's waits and one fence serves both stores."""
    words_smem = gl.allocate_shared_memory(gl.int32, [2, 4, 16, 32], words_desc.layout)
    scales_smem = gl.allocate_shared_memory(gl.bfloat16, [2, 1, 128], scales_desc.layout)
    loaded = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(loaded.index(i), count=1)
        _load_words(words_desc, scales_desc, words_smem, scales_smem, loaded, off_n, i, i, True)
    for pair in range(k_steps // 2):
        step = 2 * pair
        words0, scales0 = _read_words(words_smem, scales_smem, loaded, 0, pair)
        words1, scales1 = _read_words(words_smem, scales_smem, loaded, 1, pair)
        gl.thread_barrier()  # all four warps hold both slots' words before TMA refills them
        for i in gl.static_range(2):
            refill = step + 2 + i
            _load_words(
                words_desc,
                scales_desc,
                words_smem,
                scales_smem,
                loaded,
                off_n,
                i,
                refill,
                refill < k_steps,
            )
        # decoded before their stages are free
        tile0 = _decoded_tile(words0, scales0)
        tile1 = _decoded_tile(words1, scales1)
        _fill_stage(x_desc, x_smem, w_smem, ready, empty, off_m, tile0, step, STAGES)
        _fill_stage(x_desc, x_smem, w_smem, ready, empty, off_m, tile1, step + 1, STAGES)
        fence_async_shared()  # both tiles are written by threads and read by wgmma: one fence
        mbarrier.arrive(ready.index(step % STAGES))
        mbarrier.arrive(ready.index((step + 1) % STAGES))
    for i in gl.static_range(2):
        mbarrier.invalidate(loaded.index(i))


@gluon.jit
def _mma_partition(  # type: ignore[no-untyped-def]
    y_desc,
    k_steps,
    x_smem,
    w_smem,
    ready,
    empty,
    finished,
    off_m,
    off_n,
    STAGES: gl.constexpr,
    HALF: gl.constexpr,
):
    """Channels [64 HALF, 64 HALF + 64) of the tile for all its tokens: the weight tile is
    wgmma's A operand and the X tile, transposed, its B."""
    tokens: gl.constexpr = x_smem.shape[1]
    mma: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, tokens, 16]
    )
    acc = gl.zeros([64, tokens], gl.float32, mma)
    for step in range(k_steps):
        stage = step % STAGES
        mbarrier.wait(ready.index(stage), (step // STAGES) & 1)
        weight = w_smem.index(stage).slice(64 * HALF, 64, dim=0)
        acc = warpgroup_mma(weight, x_smem.index(stage).permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
        # step - 1's MMA has finished: its stage is free once both halves say so
        mbarrier.arrive(empty.index((step + STAGES - 1) % STAGES), pred=step > 0)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    # No MMA reads an X stage once both halves are here: X stage HALF takes this half's output.
    mbarrier.arrive(finished)
    mbarrier.wait(finished, 0)
    y_smem = x_smem.index(HALF)
    y_smem.store(gl.permute(acc.to(gl.bfloat16), (1, 0)))
    fence_async_shared()
    tma.async_copy_shared_to_global(y_desc, [off_m, off_n + 64 * HALF], y_smem)
    tma.store_wait(pendings=0)


@gluon.jit
def _warp_specialized_kernel(  # type: ignore[no-untyped-def]
    x_desc,
    y_desc,
    words_desc,
    scales_desc,
    k_steps,
    STAGES: gl.constexpr,
    MMA_REGS: gl.constexpr,
    DECODE_REGS: gl.constexpr,
):
    tokens: gl.constexpr = x_desc.block_type.shape[0]
    off_m = gl.program_id(0) * tokens
    off_n = gl.program_id(1) * 128
    x_smem = gl.allocate_shared_memory(
        gl.bfloat16, [STAGES, tokens, x_desc.block_type.shape[1]], x_desc.layout
    )
    w_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([128, 64], gl.bfloat16)
    w_smem = gl.allocate_shared_memory(gl.bfloat16, [STAGES, 128, 64], w_layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    finished = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(finished, count=2)
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=2)  # the X tile's bytes and the decoder's arrival
        mbarrier.init(empty.index(i), count=2)  # both MMA halves
    gl.warp_specialize(
        [
            (
                _mma_partition,
                (y_desc, k_steps, x_smem, w_smem, ready, empty, finished, off_m, off_n, STAGES, 0),
            ),
            (
                _mma_partition,
                (y_desc, k_steps, x_smem, w_smem, ready, empty, finished, off_m, off_n, STAGES, 1),
            ),
            (
                _decode_partition,
                (
                    x_desc,
                    words_desc,
                    scales_desc,
                    k_steps,
                    x_smem,
                    w_smem,
                    ready,
                    empty,
                    off_m,
                    off_n,
                    STAGES,
                ),
            ),
        ],
        [4, 4],
        [MMA_REGS, DECODE_REGS],
    )
    mbarrier.invalidate(finished)
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))
        mbarrier.invalidate(empty.index(i))


def warp_specialized_linear(
    x: torch.Tensor,
    packed: torch.Tensor,
    scales: torch.Tensor,
    size_n: int,
    size_k: int,
    stages: int = STAGE_CONFIGS[0],
) -> torch.Tensor:
    """x [M, size_k] BF16 @ the Marlin FP8 weight's BF16 values, transposed: [M, size_n]. Takes
    whole 128-channel tiles and 128-row block scales (the stack's layers)."""
    if x.dtype != torch.bfloat16 or x.dim() != 2 or x.shape[1] != size_k:
        raise ValueError(f"x must be BF16 [M, {size_k}], got {x.dtype} {tuple(x.shape)}")
    if size_n % BLOCK_CHANNELS or scales.shape[0] * GROUP_K != size_k:
        raise ValueError(f"needs N % {BLOCK_CHANNELS} == 0 and {GROUP_K}-row scale groups")
    if tuple(packed.shape) != (size_k // 16, 4 * size_n):
        raise ValueError(f"expected Marlin words [{size_k // 16}, {4 * size_n}]")
    y = torch.empty(x.shape[0], size_n, dtype=torch.bfloat16, device=x.device)
    x_layout = gl.NVMMASharedLayout.get_default_for([BLOCK_TOKENS, BLOCK_K], gl.bfloat16)
    x_desc = TensorDescriptor.from_tensor(x.contiguous(), [BLOCK_TOKENS, BLOCK_K], x_layout)
    # the output leaves through an X stage, so its tile has X's shape and layout
    y_desc = TensorDescriptor.from_tensor(y, [BLOCK_TOKENS, BLOCK_K], x_layout)
    words_desc = TensorDescriptor.from_tensor(
        packed.view(size_k // 16, size_n // 8, 32),
        [4, BLOCK_CHANNELS // 8, 32],
        gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=32, rank=3),
    )
    scales_desc = TensorDescriptor.from_tensor(
        scales,
        [1, BLOCK_CHANNELS],
        gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=16, rank=2),
    )
    grid = (triton.cdiv(x.shape[0], BLOCK_TOKENS), size_n // BLOCK_CHANNELS)
    _warp_specialized_kernel[grid](
        x_desc,
        y_desc,
        words_desc,
        scales_desc,
        size_k // BLOCK_K,
        STAGES=stages,
        MMA_REGS=MMA_REGS,
        DECODE_REGS=DECODE_REGS,
        num_warps=4,
        maxnreg=LAUNCH_REGS,
    )
    return y


def _name(stages: int) -> str:
    return f"warp_specialized_s{stages}"


PROBE = fused_gemm_bench.Probe(
    tool="warp_specialized_gemm",
    kernels={
        _name(s): lambda x, q, sc, n, k, s=s: warp_specialized_linear(x, q, sc, n, k, s)
        for s in STAGE_CONFIGS
    },
    configs=[
        {
            "name": _name(s),
            "block_channels": BLOCK_CHANNELS,
            "block_tokens": BLOCK_TOKENS,
            "stages": s,
            "word_stages": WORD_STAGES,
        }
        for s in STAGE_CONFIGS
    ],
)


def main(argv: Sequence[str] | None = None) -> int:
    return fused_gemm_bench.main(PROBE, __doc__.split("\n\n")[0], argv)


if __name__ == "__main__":
    sys.exit(main())
