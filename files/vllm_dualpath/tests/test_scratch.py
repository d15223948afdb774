"""The per-device scratch buffer grows, is reused, and is never allocated during capture."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from vllm_dualpath import scratch

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def _fresh():
    scratch.release_all()
    yield
    scratch.release_all()


def test_reused_while_large_enough_and_grown_when_not():
    first = scratch.acquire(CPU, 1000)
    assert first is not None and first.dtype == torch.bfloat16 and first.numel() == 1000
    again = scratch.acquire(CPU, 500)
    assert again is not None and again.data_ptr() == first.data_ptr()
    grown = scratch.acquire(CPU, 4000)
    assert grown is not None and grown.numel() == 4000
    assert scratch.capacity(CPU) == 4000
    assert scratch.acquire(CPU, 3000).data_ptr() == grown.data_ptr()


def test_no_allocation_while_a_graph_is_being_captured(monkeypatch):
    device = torch.device("cuda", 0)
    monkeypatch.setattr(scratch, "capturing", lambda d: d == device)
    allocations = []
    real_empty = torch.empty

    def counting_empty(*args, **kwargs):
        allocations.append(kwargs.get("device"))
        return real_empty(*args, **{**kwargs, "device": "cpu"})

    monkeypatch.setattr(torch, "empty", counting_empty)
    assert scratch.acquire(device, 10) is None
    assert allocations == []
    assert scratch.acquire(CPU, 10) is not None  # other devices are not capturing
    assert allocations == [CPU]


def test_growing_outside_any_capture_frees_the_old_buffer_first():
    old = weakref.ref(scratch.acquire(CPU, 1000))
    scratch.acquire(CPU, 4000)
    gc.collect()
    assert old() is None
    assert scratch.total_bytes(CPU) == 4000 * 2


def test_a_buffer_handed_out_during_capture_outlives_the_slot_growing(monkeypatch):
    """A CUDA graph replays into the buffer it captured: freeing it on growth would let the
    replays write into memory the allocator has given to others."""
    capture = {"on": False}

    def capture_stand_in(device: torch.device) -> bool:
        """Stands in for torch.cuda.is_current_stream_capturing() on this CPU device."""
        return capture["on"]

    monkeypatch.setattr(scratch, "capturing", capture_stand_in)
    first = scratch.acquire(CPU, 1000)  # grown outside capture, as vLLM's profiling run does
    capture["on"] = True
    captured = scratch.acquire(CPU, 800)  # the graph bakes this address in
    assert captured is first
    capture["on"] = False
    kept = weakref.ref(captured)
    del first, captured
    grown = scratch.acquire(CPU, 4000)
    gc.collect()
    assert kept() is not None
    assert grown is not None and grown.numel() == 4000
    assert scratch.total_bytes(CPU) == (1000 + 4000) * 2
    # The grown buffer was never captured: growing again frees it, and keeps the captured one.
    newer = weakref.ref(grown)
    del grown
    scratch.acquire(CPU, 8000)
    gc.collect()
    assert newer() is None and kept() is not None
    scratch.release_all()
    gc.collect()
    assert kept() is None
