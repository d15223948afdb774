"""Reusable BF16 scratch buffers per device for unpacked weights.

Slot 0 serves the plain unpack path and CUDA graphs; slots from 1 up serve unpack-ahead (depth + 1
of them), so a prefetch never writes a buffer a captured graph reads. Slots only grow, and never
during a capture: capture-pool memory must not outlive its graph. A buffer a graph captured is
kept when its slot grows, since the graph replays into it, until ``release_all``.
"""

from __future__ import annotations

import threading

import torch

from vllm_dualpath import settings

PLAIN_SLOT = 0
MAX_AHEAD_DEPTH = settings.MAX_UNPACK_AHEAD_DEPTH
AHEAD_SLOTS = tuple(range(1, MAX_AHEAD_DEPTH + 2))

_buffers: dict[tuple[torch.device, int], torch.Tensor] = {}
# Slots whose current buffer a CUDA graph captured, and such buffers after their slot grew.
_captured: set[tuple[torch.device, int]] = set()
_retired: list[tuple[torch.device, torch.Tensor]] = []
_lock = threading.Lock()


def capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def acquire(device: torch.device, numel: int, slot: int = PLAIN_SLOT) -> torch.Tensor | None:
    """A contiguous BF16 buffer of at least numel elements, or None while capturing a graph
    on a device whose buffer is too small (the caller then takes another path)."""
    key = (device, slot)
    with _lock:
        buffer = _buffers.get(key)
        in_capture = capturing(device)
        if buffer is not None and buffer.numel() >= numel:
            if in_capture:
                _captured.add(key)
            return buffer
        if in_capture:
            return None
        if buffer is not None and key in _captured:
            # Freed, it would go to others while a graph still replays into it.
            _captured.discard(key)
            _retired.append((device, buffer))
        # Otherwise drop the old buffer first so peak memory is the new size, not old + new.
        _buffers.pop(key, None)
        del buffer
        grown = torch.empty(numel, dtype=torch.bfloat16, device=device)
        _buffers[key] = grown
        return grown


def capacity(device: torch.device, slot: int = PLAIN_SLOT) -> int:
    """Elements the device's buffer in this slot holds now (0 if none)."""
    buffer = _buffers.get((device, slot))
    return 0 if buffer is None else buffer.numel()


def total_bytes(device: torch.device) -> int:
    """Bytes all scratch slots of the device hold now, retired buffers included."""
    with _lock:
        held = [b for (d, _), b in _buffers.items() if d == device]
        held += [b for d, b in _retired if d == device]
        return sum(b.numel() * b.element_size() for b in held)


def release_all() -> None:
    """Forget every buffer (tests, or freeing memory after a model is unloaded: only once the
    CUDA graphs that captured any of them are gone too)."""
    with _lock:
        _buffers.clear()
        _captured.clear()
        _retired.clear()
