"""Unpack ahead on real streams: the same bits as in-line unpacking, pass after pass, with hits."""

from __future__ import annotations

import pytest
import torch
from overlay_setup import force

import step_work
from vllm_dualpath import ahead, op, scratch, settings
from vllm_dualpath.marlin_reference import prepare_fp8_for_marlin, random_fp8_weight, random_scales

# Long GEMMs next to big unpacks, so a missing stream dependency shows as wrong bits.
SHAPES = [(7168, 5120), (5120, 6144), (1536, 5120), (5120, 768)] * 2
M = 4096


def _layer(n, k, generator):
    weight = random_fp8_weight(n, k, "cuda", generator)
    scales = random_scales(n, k, (128, 128), "cuda", generator)
    return prepare_fp8_for_marlin(weight, scales, (128, 128))


def _stack(generator):
    return [_layer(n, k, generator) for n, k in SHAPES]


def _forward(layers, inputs) -> list[torch.Tensor]:
    return [
        torch.ops.dualpath.fp8_marlin_linear(
            x, layer.qweight, layer.scales, None, layer.size_n, layer.size_k, layer.bias, True
        )
        for layer, x in zip(layers, inputs, strict=True)
    ]


@pytest.mark.parametrize(
    ("depth", "inference"), [(1, False), (2, False), (1, True)], ids=["1", "2", "1-inference"]
)
def test_ahead_gives_the_in_line_bits_on_every_pass(generator, depth, inference) -> None:
    # inference: weights, activations and scratch made under torch.inference_mode, as vLLM's
    # forward runs (no version counters)
    with torch.inference_mode(inference):
        _ahead_gives_the_in_line_bits(generator, depth)


def _ahead_gives_the_in_line_bits(generator, depth) -> None:
    layers = _stack(generator)
    inputs = [
        torch.randn(M, k, device="cuda", generator=generator).to(torch.bfloat16) for _, k in SHAPES
    ]
    force("unpack")
    inline = settings.Settings(small_m_max=0, large_m_min=1, unpack_ahead=False)
    op.configure(inline, None)
    expected = _forward(layers, inputs)
    torch.cuda.synchronize()

    ahead.reset_all()
    scratch.release_all()  # so the slots held below are this test's
    ahead_on = settings.Settings(
        small_m_max=0, large_m_min=1, unpack_ahead_min_m=1, unpack_ahead_depth=depth
    )
    op.configure(ahead_on, None)
    for _ in range(4):
        got = _forward(layers, inputs)
        for index, (g, e) in enumerate(zip(got, expected, strict=True)):
            assert torch.equal(g, e), f"layer {index} differs"
    stats = ahead.for_device(inputs[0].device).stats
    # First pass learns the order; after it every layer but the first of a pass is a hit.
    assert stats.hits == 3 * (len(SHAPES) - 1)
    largest = max(n * k for n, k in SHAPES)
    device = inputs[0].device
    assert max(scratch.capacity(device, slot) for slot in scratch.AHEAD_SLOTS) >= largest
    held = [slot for slot in scratch.AHEAD_SLOTS if scratch.capacity(device, slot) > 0]
    assert held == list(scratch.AHEAD_SLOTS[: depth + 1])
    assert scratch.capacity(device) >= largest  # kept for graphs captured later


def test_a_prefetch_starts_when_the_gemm_before_it_has_ended(generator) -> None:
    # A long GEMM, then a layer whose weight unpacks in microseconds, all queued behind a wait
    # that leaves the GPU free: started as soon as its slot is free, the prefetch would be
    # written before the GEMM even starts.
    layers = [_layer(7168, 5120, generator), _layer(5120, 768, generator)]
    inputs = [
        torch.randn(8192, layer.size_k, device="cuda", generator=generator).to(torch.bfloat16)
        for layer in layers
    ]
    force("unpack")
    ahead.reset_all()
    op.configure(settings.Settings(small_m_max=0, large_m_min=1, unpack_ahead_min_m=1), None)
    state = ahead.for_device(inputs[0].device)
    for _ in range(2):  # learns the order, then prefetches once: both slots exist from now on
        _forward(layers, inputs)
    hold = step_work.LinkWait(2000.0)
    hold()
    torch.cuda.synchronize()
    first = torch.ops.dualpath.fp8_marlin_linear
    layer, x = layers[0], inputs[0]
    hold()
    first(x, layer.qweight, layer.scales, None, layer.size_n, layer.size_k, layer.bias, True)
    gemm_done = torch.cuda.Event(enable_timing=True)
    gemm_done.record()
    assert len(state._pending) == 1
    prefetch = state._pending[0]
    assert prefetch.ready is not None
    written = torch.cuda.Event(enable_timing=True)
    written.record(state._stream)  # the side stream, right behind the prefetch
    torch.cuda.synchronize()
    assert gemm_done.elapsed_time(written) > 0
