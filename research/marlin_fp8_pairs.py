"""The Marlin FP8 decode the fused GEMM probes share (``register_a_gemm.py``,
``warp_specialized_gemm.py``): a 32-bit word's four E4M3 codes to two bf16x2 pairs, each value
FP8 x scale rounded to BF16 once, as the overlay's unpack rounds it."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.jit
def doubled_scales(scales):  # type: ignore[no-untyped-def]
    """Each BF16 scale in both halves of an int32, to multiply a bf16x2 pair."""
    bits = scales.to(gl.int16, bitcast=True).to(gl.int32) & 0xFFFF
    return (bits << 16) | bits


@gluon.jit
def scaled_pairs(words, scale2):  # type: ignore[no-untyped-def]
    """Two bf16x2 per word: K rows (2t, 2t + 1) from bytes 0, 2 and (2t + 8, 2t + 9) from 1, 3.
    A code's bits shifted into BF16 position read as value x 2**-120; the stored scale carries
    2**120, and mul.rn.bf16x2 rounds the exact product once."""
    low = ((words & 0x007F007F) << 4) | ((words & 0x00800080) << 8)
    shifted = words >> 8
    high = ((shifted & 0x007F007F) << 4) | ((shifted & 0x00800080) << 8)
    low = gl.inline_asm_elementwise(
        "mul.rn.bf16x2 $0, $1, $2;", "=r,r,r", [low, scale2], gl.int32, True, 1
    )
    high = gl.inline_asm_elementwise(
        "mul.rn.bf16x2 $0, $1, $2;", "=r,r,r", [high, scale2], gl.int32, True, 1
    )
    return low, high
