"""The per-device scratch buffer grows, is reused, and is never allocated during capture."""

from __future__ import annotations

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
