"""A W8A16 GEMM that decodes the Marlin FP8 weight straight into wgmma's register operand, timed
beside BF16 cuBLAS and the overlay's unpack + cuBLAS on one Hopper GPU.

    export VLLM_DUALPATH_MARLIN_LIB=build/marlin/libvllm_marlin_fp8.so
    export PYTHONPATH=files/vllm_dualpath/src:files/vllm_dualpath/benchmarks
    python3 research/register_a_gemm.py \\
        --out OUT/register-a-gemm.json --png OUT/register-a-gemm.png

Needs a Hopper GPU, Triton's Gluon (Triton 3.6) and the Marlin library. Each output tile is
computed transposed (Y^T = W X^T) so the weight is the A operand, which may come from registers;
exits non-zero when a layer's error exceeds 1.5x cuBLAS's. Design and results:
research/results/register-a-gemm-h200.md.
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

BLOCK_K = 64  # four 16-row Marlin tiles per K step
# (block_m, stages, overlap): output tile of 128 channels x block_m tokens, eight warps (two
# warpgroups), X stages in shared memory, one MMA kept in flight (two A register sets) or not.
CONFIGS: tuple[tuple[int, int, bool], ...] = (
    (256, 4, True),
    (128, 8, True),
    (256, 2, False),
    (128, 4, False),
)


@gluon.constexpr_function  # type: ignore[untyped-decorator]
def _words_layout(num_warps: int) -> gl.DistributedLinearLayout:
    """Words [BN/2, 16] of one half (r) of each 16-channel group: row 8 * group + a (channel
    16 * group + 8r + a), column 4 * kt + t. Lanes hold (a, t) as an m16n8k16 A fragment does."""
    return gl.DistributedLinearLayout(
        reg_bases=[[0, 4], [0, 8]],
        lane_bases=[[0, 1], [0, 2], [1, 0], [2, 0], [4, 0]],
        warp_bases=[[8 << i, 0] for i in range(num_warps.bit_length() - 1)],
        block_bases=[],
        shape=[8 * num_warps, 16],
    )


@gluon.jit
def _weight_tile(words0, words1, scales0, scales1, BN: gl.constexpr, dot_a: gl.constexpr):  # type: ignore[no-untyped-def]
    """One K step's [BN, 64] BF16 weight tile, in wgmma's register A layout."""
    low0, high0 = scaled_pairs(words0, doubled_scales(scales0)[:, None])
    low1, high1 = scaled_pairs(words1, doubled_scales(scales1)[:, None])
    pairs = gl.join(gl.join(low0, high0), gl.join(low1, high1))  # [BN/2, 16, h, r]
    halves = gl.join(pairs & 0xFFFF, (pairs >> 16) & 0xFFFF)  # [BN/2, 16, h, r, b]
    halves = halves.to(gl.int16).to(gl.bfloat16, bitcast=True)
    halves = gl.reshape(halves, [BN // 16, 8, 4, 4, 2, 2, 2])  # group, a, kt, t, h, r, b
    halves = gl.permute(halves, [0, 5, 1, 2, 4, 3, 6])  # group, r, a, kt, h, t, b
    # Channel 16 * group + 8r + a, K row 16kt + 8h + 2t + b: the A layout's own register order.
    return gl.convert_layout(gl.reshape(halves, [BN, 64]), dot_a, assert_trivial=True)


@gluon.jit
def _scale_columns(n, GROUPED: gl.constexpr):  # type: ignore[no-untyped-def]
    """Column of channel n in the permuted scale rows (as ``unpack._scale_columns``)."""
    if GROUPED:
        c = n & 63
        return (n - c) + 8 * (c & 7) + (c >> 3)
    c = n & 31
    return (n - c) + 8 * ((c & 7) >> 1) + 2 * (c >> 3) + (c & 1)


@gluon.jit
def _step_operands(
    packed_ptr,
    word0,
    step_words,
    scales_ptr,
    padded_n,
    group_steps,
    columns0,
    columns1,
    ok0,
    ok1,
    k_steps,
    step,
    GROUPED: gl.constexpr,
):
    """Step ``step``'s words and scales for channels r = 0 and r = 1, loaded well before they
    are decoded (zero words past the last step, whose scale row stays in bounds)."""
    mask = ok0[:, None] & (step < k_steps)
    offsets = word0 + step * step_words
    words0 = gl.load(packed_ptr + offsets, mask=mask, other=0)
    words1 = gl.load(packed_ptr + offsets + 1, mask=mask, other=0)
    last = gl.minimum(step, k_steps - 1)
    row = (last // group_steps) * padded_n if GROUPED else 0
    scales0 = gl.load(scales_ptr + row + columns0, mask=ok0, other=0)
    scales1 = gl.load(scales_ptr + row + columns1, mask=ok1, other=0)
    return words0, words1, scales0, scales1


@gluon.jit
def _load_x(x_desc, x_smem, bars, off_m, k_steps, STAGES: gl.constexpr, step, pred):
    """Step ``step``'s X tile into its stage by TMA (nothing past the last step)."""
    stage = step % STAGES
    pred = pred & (step < k_steps)
    mbarrier.expect(bars.index(stage), x_desc.block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(
        x_desc,
        [off_m, step * x_desc.block_type.shape[1]],
        bars.index(stage),
        x_smem.index(stage),
        pred=pred,
    )


@gluon.jit
def _refill(x_desc, x_smem, bars, off_m, k_steps, STAGES: gl.constexpr, done):
    """Step ``done``'s stage, whose MMA has finished, takes step done + STAGES (none before
    step 0)."""
    _load_x(x_desc, x_smem, bars, off_m, k_steps, STAGES, done + STAGES, done >= 0)


@gluon.jit
def _issue_step(
    x_desc,
    x_smem,
    bars,
    off_m,
    k_steps,
    STAGES: gl.constexpr,
    step,
    a,
    a_before,
    acc,
    OUTSTANDING: gl.constexpr,
):
    """Issue step ``step``'s MMA. With one MMA left outstanding, wait for the one before it
    (whose register tile ``a_before`` stays live until then) and refill its stage."""
    stage = step % STAGES
    mbarrier.wait(bars.index(stage), (step // STAGES) & 1)
    acc = warpgroup_mma(a, x_smem.index(stage).permute((1, 0)), acc, is_async=True)
    if OUTSTANDING == 1:
        acc, a_before = warpgroup_mma_wait(num_outstanding=1, deps=(acc, a_before))
        _refill(x_desc, x_smem, bars, off_m, k_steps, STAGES, step - 1)
    return acc


@gluon.jit
def _register_a_kernel(  # type: ignore[no-untyped-def]
    x_desc,
    y_desc,
    packed_ptr,
    scales_ptr,
    words_per_row,
    padded_n,
    k_per_group,
    k_steps,
    GROUPED: gl.constexpr,
    STAGES: gl.constexpr,
    OVERLAP: gl.constexpr,
    num_warps: gl.constexpr,
):
    BM: gl.constexpr = x_desc.block_type.shape[0]
    BK: gl.constexpr = x_desc.block_type.shape[1]
    BN: gl.constexpr = y_desc.block_type.shape[1]
    gl.static_assert(BK == 64)
    gl.static_assert(16 * num_warps == BN)
    off_m = gl.program_id(0) * BM
    off_n = gl.program_id(1) * BN
    mma: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BM, 16]
    )
    dot_a: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    words_layout: gl.constexpr = _words_layout(num_warps)

    row = gl.arange(0, BN // 2, layout=gl.SliceLayout(1, words_layout))
    column = gl.arange(0, 16, layout=gl.SliceLayout(0, words_layout))
    n0 = off_n + 16 * (row >> 3) + (row & 7)  # the r = 0 channel; r = 1 is n0 + 8
    n1 = n0 + 8
    # Word 32a + 8t + 2w + r of each 16x64 tile (see vllm_dualpath.layout).
    word0 = ((n0 >> 6) * 256 + 32 * (n0 & 7) + 2 * ((n0 >> 4) & 3))[:, None] + (
        (column >> 2) * words_per_row + 8 * (column & 3)
    )[None, :]
    columns0 = _scale_columns(n0, GROUPED)
    columns1 = _scale_columns(n1, GROUPED)
    ok0 = n0 < padded_n
    ok1 = n1 < padded_n
    step_words = (BK // 16) * words_per_row
    group_steps = k_per_group // BK

    x_smem = gl.allocate_shared_memory(x_desc.dtype, [STAGES, BM, BK], x_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    ring = (x_desc, x_smem, bars, off_m, k_steps)
    for i in gl.static_range(STAGES):
        mbarrier.init(bars.index(i), count=1)
        _load_x(*ring, STAGES, i, True)

    acc = gl.zeros([BN, BM], gl.float32, mma)
    load = (
        packed_ptr,
        word0,
        step_words,
        scales_ptr,
        padded_n,
        group_steps,
        columns0,
        columns1,
        ok0,
        ok1,
        k_steps,
    )
    if OVERLAP:
        # Two register sets for A, so one MMA is always in flight: while step s runs, step
        # s - 1 has been waited for, its registers take step s + 1's tile, and step s + 1 is
        # issued behind step s. Unrolled by two so neither set is ever copied into the other.
        # Words and scales are loaded two steps before they are decoded.
        even = _step_operands(*load, 0, GROUPED)
        odd = _step_operands(*load, 1, GROUPED)
        a_even = _weight_tile(*even, BN, dot_a)
        a_odd = gl.zeros([BN, BK], gl.bfloat16, dot_a)
        even = _step_operands(*load, 2, GROUPED)
        for pair in range(k_steps // 2):
            step = 2 * pair
            acc = _issue_step(*ring, STAGES, step, a_even, a_odd, acc, 1)
            later = _step_operands(*load, step + 3, GROUPED)
            a_odd = _weight_tile(*odd, BN, dot_a)
            acc = _issue_step(*ring, STAGES, step + 1, a_odd, a_even, acc, 1)
            odd = later
            later = _step_operands(*load, step + 4, GROUPED)
            a_even = _weight_tile(*even, BN, dot_a)
            even = later
        acc, a_odd = warpgroup_mma_wait(num_outstanding=0, deps=(acc, a_odd))
    else:
        # One register set: each step's MMA is waited for before the next is issued; the next
        # step's tile decodes while it runs, into registers the running MMA does not read.
        a = _weight_tile(*_step_operands(*load, 0, GROUPED), BN, dot_a)
        following = _step_operands(*load, 1, GROUPED)
        for step in range(k_steps):
            later = _step_operands(*load, step + 2, GROUPED)
            acc = _issue_step(*ring, STAGES, step, a, a, acc, 0)
            a_next = _weight_tile(*following, BN, dot_a)
            acc, a = warpgroup_mma_wait(num_outstanding=0, deps=(acc, a))
            _refill(*ring, STAGES, step)
            a = a_next
            following = later
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(i))

    y_smem = gl.allocate_shared_memory(gl.bfloat16, [BM, BN], y_desc.layout)
    y_smem.store(gl.permute(acc.to(gl.bfloat16), (1, 0)))
    fence_async_shared()
    tma.async_copy_shared_to_global(y_desc, [off_m, off_n], y_smem)
    tma.store_wait(pendings=0)


def register_a_linear(
    x: torch.Tensor,
    packed: torch.Tensor,
    scales: torch.Tensor,
    size_n: int,
    size_k: int,
    block_m: int = 256,
    stages: int = 4,
    overlap: bool = True,
) -> torch.Tensor:
    """x [M, size_k] BF16 @ the Marlin FP8 weight's BF16 values, transposed: [M, size_n]. The
    defaults are the tile measured fastest on an H200 (research/results/register-a-gemm-h200.md)."""
    groups = scales.shape[0]
    if x.dtype != torch.bfloat16 or x.dim() != 2 or x.shape[1] != size_k:
        raise ValueError(f"x must be BF16 [M, {size_k}], got {x.dtype} {tuple(x.shape)}")
    if size_k % (2 * BLOCK_K) or (size_k // groups) % BLOCK_K or size_n % 8:
        raise ValueError(f"needs K in pairs of {BLOCK_K}-row steps, whole groups, N % 8 == 0")
    num_warps = 8
    block_n = 16 * num_warps
    y = torch.empty(x.shape[0], size_n, dtype=torch.bfloat16, device=x.device)
    x_layout = gl.NVMMASharedLayout.get_default_for([block_m, BLOCK_K], gl.bfloat16)
    y_layout = gl.NVMMASharedLayout.get_default_for([block_m, block_n], gl.bfloat16)
    x_desc = TensorDescriptor.from_tensor(x.contiguous(), [block_m, BLOCK_K], x_layout)
    y_desc = TensorDescriptor.from_tensor(y, [block_m, block_n], y_layout)
    grid = (triton.cdiv(x.shape[0], block_m), triton.cdiv(size_n, block_n))
    _register_a_kernel[grid](
        x_desc,
        y_desc,
        packed,
        scales,
        packed.shape[1],
        packed.shape[1] // 4,
        size_k // groups,
        size_k // BLOCK_K,
        GROUPED=groups > 1,
        STAGES=stages,
        OVERLAP=overlap,
        num_warps=num_warps,
    )
    return y


def _name(config: tuple[int, int, bool]) -> str:
    return f"register_a_m{config[0]}_s{config[1]}" + ("_overlap" if config[2] else "")


PROBE = fused_gemm_bench.Probe(
    tool="register_a_gemm",
    kernels={
        _name(c): lambda x, q, s, n, k, c=c: register_a_linear(x, q, s, n, k, *c) for c in CONFIGS
    },
    configs=[
        {"name": _name(c), "block_m": c[0], "block_n": 128, "stages": c[1], "overlap": c[2]}
        for c in CONFIGS
    ],
)


def main(argv: Sequence[str] | None = None) -> int:
    return fused_gemm_bench.main(PROBE, __doc__.split("\n\n")[0], argv)


if __name__ == "__main__":
    sys.exit(main())
