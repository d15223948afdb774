"""The work of a decoder layer around its dense GEMMs, for the model-level benchmark.

Attention and the SiLU-and-mul run for real, on fixed inputs. The TP2 all-reduce cannot run on
one GPU: its stand-in holds the stream as long as the link would, a few one-warp programs
spinning on the global timer with the rest of the GPU free, as NCCL's kernels leave it. The
routed experts are left out, so the unpack has less to hide under than in a real layer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import triton
import triton.language as tl

from vllm_dualpath.calibrate import Shape

HEAD_DIM = 128
LINK_PROGRAMS = 2  # spinning programs of the all-reduce stand-in, as NCCL's channels

Work = Callable[[], object]


def allreduce_us(m: int, link_gbs: float, hidden: int) -> float:
    """Time of a two-rank all-reduce of M BF16 rows of ``hidden`` at a bus bandwidth of
    ``link_gbs`` GB/s: a ring of two moves the whole tensor once each way."""
    if m < 1 or link_gbs <= 0:
        raise ValueError(f"need M >= 1 and a positive link bandwidth, got {m}, {link_gbs}")
    return m * hidden * 2 / (link_gbs * 1e3)


@triton.jit  # type: ignore[untyped-decorator]
def _now_ns():  # type: ignore[no-untyped-def]
    """The GPU's global timer (ns); read anew each time (not pure)."""
    return tl.inline_asm_elementwise(
        "mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1
    )


@triton.jit  # type: ignore[untyped-decorator]
def _hold_kernel(duration_ns):  # type: ignore[no-untyped-def]
    start = _now_ns()
    now = start
    while now - start < duration_ns:
        now = _now_ns()


class LinkWait:
    """Holds the current stream ``us`` microseconds, launched as cheaply as the host can."""

    def __init__(self, us: float) -> None:
        # A multiple of 16 nanoseconds keeps the argument's specialization the same for every
        # value, so the first launch's compiled kernel serves them all.
        self.duration_ns = max(16, round(us * 1e3 / 16) * 16)
        self._launch: Callable[..., object] | None = None

    def __call__(self) -> None:
        grid = (LINK_PROGRAMS, 1, 1)
        if self._launch is None:
            compiled = _hold_kernel[grid](self.duration_ns, num_warps=1)
            self._launch = compiled[grid]
            return
        self._launch(self.duration_ns)


def _attention(m: int, heads: int, device: torch.device, generator: torch.Generator) -> Work:
    # The KV heads (4 per TP2 rank) are widened to the query heads: the same work per head.
    q, k, v = (
        torch.randn(1, heads, m, HEAD_DIM, device=device, generator=generator).to(torch.bfloat16)
        for _ in range(3)
    )
    return lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def _silu_and_mul(m: int, width: int, device: torch.device, generator: torch.Generator) -> Work:
    gate_up = torch.randn(m, 2 * width, device=device, generator=generator)
    gate, up = gate_up.to(torch.bfloat16).chunk(2, dim=1)
    return lambda: torch.nn.functional.silu(gate) * up


DECODER_LAYERS = ("qkv_proj", "o_proj", "shared_gate_up", "shared_down")


def decoder_work(
    shapes: Sequence[Shape],
    m: int,
    link_gbs: float | None,
    generator: torch.Generator,
    device: torch.device,
) -> dict[int, Work]:
    """The work after each dense layer of a decoder step, by the layer's index in ``shapes``:
    attention after qkv_proj, the SiLU-and-mul after shared_gate_up, the all-reduce stand-in
    after o_proj and shared_down (none without ``link_gbs``); sizes follow the layers' shapes."""
    unknown = [s.name for s in shapes if s.name not in DECODER_LAYERS]
    if unknown:
        raise ValueError(f"no decoder work known after layers {unknown}")
    by_name = {s.name: s for s in shapes}
    if len(by_name) != len(DECODER_LAYERS):
        raise ValueError(f"a decoder step needs each of {DECODER_LAYERS}")
    o_proj, down = by_name["o_proj"], by_name["shared_down"]
    attention = _attention(m, o_proj.k // HEAD_DIM, device, generator)
    silu_and_mul = _silu_and_mul(m, down.k, device, generator)
    wait = None if link_gbs is None else LinkWait(allreduce_us(m, link_gbs, o_proj.n))
    after: dict[str, Work | None] = {
        "qkv_proj": attention,
        "o_proj": wait,
        "shared_gate_up": silu_and_mul,
        "shared_down": wait,
    }
    return {
        index: follow
        for index, shape in enumerate(shapes)
        if (follow := after[shape.name]) is not None
    }
