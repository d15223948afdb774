"""Reusable BF16 scratch buffers per device for unpacked weights.

Slot 0 serves the plain unpack path (and CUDA graphs); slots from 1 up serve the unpack-ahead
path (``ahead``: depth + 1 of them), so a prefetch in flight never writes a buffer a captured
graph reads. Each slot only grows (to the largest weight it has held), so steady state allocates
nothing; none is allocated while a CUDA graph is being captured, because memory from a capture
pool must not outlive the graph. vLLM's profiling forward pass at the largest batch grows them
before capture.
"""

from __future__ import annotations

import threading

import torch

from vllm_dualpath import settings

PLAIN_SLOT = 0
MAX_AHEAD_DEPTH = settings.MAX_UNPACK_AHEAD_DEPTH
AHEAD_SLOTS = tuple(range(1, MAX_AHEAD_DEPTH + 2))

_buffers: dict[tuple[torch.device, int], torch.Tensor] = {}
_lock = threading.Lock()


def capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def acquire(device: torch.device, numel: int, slot: int = PLAIN_SLOT) -> torch.Tensor | None:
    """A contiguous BF16 buffer of at least numel elements, or None while capturing a graph
    on a device whose buffer is too small (the caller then takes another path)."""
    with _lock:
        buffer = _buffers.get((device, slot))
        if buffer is not None and buffer.numel() >= numel:
            return buffer
        if capturing(device):
            return None
        # Drop the old buffer first so peak memory is the new size, not old + new.
        _buffers.pop((device, slot), None)
        del buffer
        grown = torch.empty(numel, dtype=torch.bfloat16, device=device)
        _buffers[(device, slot)] = grown
        return grown


def capacity(device: torch.device, slot: int = PLAIN_SLOT) -> int:
    """Elements the device's buffer in this slot holds now (0 if none)."""
    buffer = _buffers.get((device, slot))
    return 0 if buffer is None else buffer.numel()


def total_bytes(device: torch.device) -> int:
    """Bytes all scratch slots of the device hold now."""
    with _lock:
        return sum(b.numel() * b.element_size() for (d, _), b in _buffers.items() if d == device)


def release_all() -> None:
    """Forget every buffer (tests, or freeing memory after a model is unloaded)."""
    with _lock:
        _buffers.clear()
