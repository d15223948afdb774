"""One reusable BF16 scratch buffer per device for unpacked weights.

It only grows (to the largest weight seen), so steady state allocates nothing; it is never
allocated while a CUDA graph is being captured, because memory from a capture pool must not
outlive the graph. vLLM's profiling forward pass at the largest batch grows it before capture.
"""

from __future__ import annotations

import threading

import torch

_buffers: dict[torch.device, torch.Tensor] = {}
_lock = threading.Lock()


def _capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def acquire(device: torch.device, numel: int) -> torch.Tensor | None:
    """A contiguous BF16 buffer of at least numel elements, or None while capturing a graph
    on a device whose buffer is too small (the caller then takes another path)."""
    with _lock:
        buffer = _buffers.get(device)
        if buffer is not None and buffer.numel() >= numel:
            return buffer
        if _capturing(device):
            return None
        # Drop the old buffer first so peak memory is the new size, not old + new.
        _buffers.pop(device, None)
        del buffer
        grown = torch.empty(numel, dtype=torch.bfloat16, device=device)
        _buffers[device] = grown
        return grown


def capacity(device: torch.device) -> int:
    """Elements the device's buffer holds now (0 if none)."""
    buffer = _buffers.get(device)
    return 0 if buffer is None else buffer.numel()


def release_all() -> None:
    """Forget every buffer (tests, or freeing memory after a model is unloaded)."""
    with _lock:
        _buffers.clear()
