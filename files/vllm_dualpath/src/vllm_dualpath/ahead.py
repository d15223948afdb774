"""Unpack ahead: the next layers' weights are unpacked on a side stream before their calls come.

vLLM runs a pass's dense layers in the same order every time, so the order seen once predicts
the next calls. A call takes its weight from the slot a prefetch filled (a hit) or unpacks it now
(a miss), then queues the next ``depth`` layers' unpacks, to start when its GEMM has ended. A
prefetch serves only its own layer's next call in the same pass, with the very tensors it read:
results never depend on a prediction. Calls must come from one CUDA stream; a call from another
first waits for all the previous one queued. On the CPU (tests) a prefetch runs at once. The
whole contract: the package README, "Unpack ahead".
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from vllm_dualpath import scratch, unpack

logger = logging.getLogger("vllm.dualpath")


@dataclass(frozen=True)
class Job:
    """Everything one unpack needs; ``scales`` None leaves the FP8 values unscaled."""

    weight: torch.Tensor
    scales: torch.Tensor | None
    size_n: int
    size_k: int

    @property
    def key(self) -> tuple[int, int, int, int]:
        scales = 0 if self.scales is None else self.scales.data_ptr()
        return (self.weight.data_ptr(), scales, self.size_n, self.size_k)

    def run(self, buffer: torch.Tensor) -> torch.Tensor:
        return unpack.unpack_weight(self.weight, self.scales, self.size_n, self.size_k, buffer)


Key = tuple[int, int, int, int]


@dataclass(frozen=True)
class _JobRef:
    """A Job that does not keep its tensors alive (an unloaded model's weights must go)."""

    weight: weakref.ref[torch.Tensor]
    scales: weakref.ref[torch.Tensor] | None
    size_n: int
    size_k: int

    @classmethod
    def of(cls, job: Job) -> _JobRef:
        scales = None if job.scales is None else weakref.ref(job.scales)
        return cls(weakref.ref(job.weight), scales, job.size_n, job.size_k)

    def job(self) -> Job | None:
        weight = self.weight()
        scales = None if self.scales is None else self.scales()
        if weight is None or (self.scales is not None and scales is None):
            return None
        return Job(weight, scales, self.size_n, self.size_k)


@dataclass(frozen=True)
class _Source:
    """The tensors a prefetch read, and their versions then: a weight's address alone may be
    reused by another tensor, and an in-place change keeps it. An inference tensor keeps no
    version (None): for it, being the very tensor read is the whole check, which holds as long
    as weights change only between passes (a prefetch never crosses one)."""

    weight: weakref.ref[torch.Tensor]
    weight_version: int | None
    scales: weakref.ref[torch.Tensor] | None
    scales_version: int | None

    @classmethod
    def of(cls, job: Job) -> _Source:
        weight = weakref.ref(job.weight), unpack.tensor_version(job.weight)
        if job.scales is None:
            return cls(*weight, None, None)
        return cls(*weight, weakref.ref(job.scales), unpack.tensor_version(job.scales))

    def unchanged_in(self, job: Job) -> bool:
        """Whether ``job`` holds the very tensors read, unchanged as far as their versions see."""
        if self.weight() is not job.weight:
            return False
        if self.weight_version != unpack.tensor_version(job.weight):
            return False
        if job.scales is None or self.scales is None:
            return job.scales is None and self.scales is None
        return self.scales() is job.scales and self.scales_version == unpack.tensor_version(
            job.scales
        )


@dataclass(eq=False)  # slots compare by identity (``in`` on the pending queue)
class _Slot:
    index: int
    holds: Key | None = None
    last_use: int = 0  # when a call or a prefetch last took it (least recent is reused first)
    weight: torch.Tensor | None = None  # the [n, k] view of what it holds
    source: _Source | None = None  # what a prefetch into it read (None after an in-line unpack)
    # Recorded again on every use (an event wait sees its latest record).
    ready: torch.cuda.Event | None = None  # side stream: the last prefetch into it is written
    free: torch.cuda.Event | None = None  # current stream: its last reader has run


@dataclass
class Stats:
    hits: int = 0
    misses: int = 0
    prefetches: int = 0
    stream_switches: int = 0


@dataclass
class UnpackAhead:
    """The unpack-ahead state of one device."""

    device: torch.device
    stats: Stats = field(default_factory=Stats)
    # Layers unpacked ahead of the current one; slots in use: depth + 1.
    depth: int = 1
    _slots: tuple[_Slot, ...] = field(
        default_factory=lambda: tuple(_Slot(index) for index in scratch.AHEAD_SLOTS)
    )
    _order: dict[Key, int] = field(default_factory=dict)
    _successor: dict[Key, Key] = field(default_factory=dict)
    _jobs: dict[Key, _JobRef] = field(default_factory=dict)
    _previous: Key | None = None
    # Slots prefetched into, in the order their layers are predicted to come.
    _pending: deque[_Slot] = field(default_factory=deque)
    _clock: int = 0
    _stream: torch.cuda.Stream | None = None
    _on_gpu: bool = False
    # The caller's stream, as an object, and its handle: fetching the handle is cheap, building
    # the object costs several microseconds per call.
    _current: torch.cuda.Stream | None = None
    _current_handle: int = 0
    _index: int = 0
    # Start each prefetch when this layer's GEMM has ended, not as soon as its slot is free
    # (False: benchmarks compare the two).
    after_gemm: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.depth <= scratch.MAX_AHEAD_DEPTH:
            raise ValueError(f"depth must be 1..{scratch.MAX_AHEAD_DEPTH}, got {self.depth}")
        self._on_gpu = self.device.type == "cuda"
        if self._on_gpu:
            self._index = (
                torch.cuda.current_device() if self.device.index is None else self.device.index
            )

    def _current_stream(self) -> torch.cuda.Stream:
        handle = torch._C._cuda_getCurrentRawStream(self._index)
        if self._current is None or handle != self._current_handle:
            stream = torch.cuda.current_stream(self.device)
            if self._current is not None:
                self._follow(stream, self._current)
            self._current = stream
            self._current_handle = handle
        return self._current

    def _follow(self, stream: torch.cuda.Stream, previous: torch.cuda.Stream) -> None:
        """Order a new caller stream after the previous one: the events alone do not order its
        reads of the slots before in-line rewrites."""
        if self.stats.stream_switches == 0:
            logger.info(
                "vllm-dualpath: unpack-ahead calls moved to another CUDA stream; each switch "
                "waits for the previous stream (one caller stream is assumed)"
            )
        self.stats.stream_switches += 1
        stream.wait_stream(previous)

    def _buffer(self, slot: _Slot, job: Job, current: torch.cuda.Stream | None) -> torch.Tensor:
        numel = job.size_n * job.size_k
        growing = scratch.capacity(self.device, slot.index) < numel
        if growing and current is not None and self._stream is not None:
            # Growing frees the old buffer to the current stream's pool: let it wait for
            # side-stream work that may still write there.
            current.wait_stream(self._stream)
        buffer = scratch.acquire(self.device, numel, slot.index)
        if buffer is None:  # only while capturing, where the op never comes here
            raise RuntimeError("vllm-dualpath: unpack-ahead scratch requested during capture")
        return buffer

    def _learn(self, key: Key, job: Job) -> None:
        known = self._jobs.get(key)
        if known is None or known.weight() is not job.weight:
            self._jobs[key] = _JobRef.of(job)
        self._order.setdefault(key, len(self._order))
        if self._previous is not None and self._previous != key:
            self._successor[self._previous] = key
        self._previous = key

    def _claim(self, slot: _Slot, key: Key) -> _Slot:
        self._clock += 1
        slot.last_use = self._clock
        slot.holds = key
        slot.source = None  # until a prefetch into it has run
        return slot

    def _spare_slot(self, busy: _Slot | None) -> _Slot:
        """The least recently used slot of the first depth + 1 that holds no pending prefetch
        and is not ``busy``: a prefetch into it waits for its last reader, not for a GEMM
        queued later."""
        candidates = [
            s for s in self._slots[: self.depth + 1] if s is not busy and s not in self._pending
        ]
        return min(candidates, key=lambda s: s.last_use)

    def _drop_pending(self) -> None:
        self._pending.clear()
        _queued.pop(self.device, None)

    def _prefetched(self, key: Key, job: Job) -> torch.Tensor | None:
        """The weight the first pending prefetch unpacked, if it is this job's."""
        head = self._pending[0] if self._pending else None
        if head is None or head.holds != key or head.source is None:
            return None
        return head.weight if head.source.unchanged_in(job) else None

    def _take(
        self, key: Key, job: Job, current: torch.cuda.Stream | None
    ) -> tuple[_Slot, torch.Tensor]:
        weight = self._prefetched(key, job)
        if weight is not None:
            slot = self._pending.popleft()
            if not self._pending:
                _queued.pop(self.device, None)
            self.stats.hits += 1
            if current is not None and slot.ready is not None:
                current.wait_event(slot.ready)
            return slot, weight
        self.stats.misses += 1
        # Off the predicted order: the prefetches queued are of no use now. A slot one of them
        # may still be writing is reused last; the wait below orders it after that write.
        self._drop_pending()
        slot = self._spare_slot(None)
        if current is not None and slot.ready is not None:
            current.wait_event(slot.ready)
        self._claim(slot, key)
        slot.weight = job.run(self._buffer(slot, job, current))
        return slot, slot.weight

    def passed_over(self, weight_pointer: int) -> None:
        """The layer with this weight came on another path: a prefetch queued for it would
        wait for its next call on this path, perhaps passes later, after a weight update."""
        if any(s.holds is not None and s.holds[0] == weight_pointer for s in self._pending):
            self._drop_pending()

    def _next_in_pass(self, key: Key) -> Key | None:
        successor = self._successor.get(key)
        if successor is None or self._order[successor] <= self._order[key]:
            return None
        return successor

    def _prefetch_successors(
        self, key: Key, used: _Slot, current: torch.cuda.Stream | None
    ) -> None:
        """Queue unpacks of the layers predicted after ``key`` until ``depth`` are pending."""
        last = self._pending[-1].holds if self._pending else key
        while len(self._pending) < self.depth and last is not None:
            successor = self._next_in_pass(last)
            if successor is None:
                return
            known = self._jobs.get(successor)
            job = None if known is None else known.job()
            if job is None:  # its tensors are gone
                self._forget(successor)
                return
            self._prefetch(job, successor, used, current)
            last = successor

    def _forget(self, key: Key) -> None:
        """Drop a layer and every prediction of it (several layers may have led to it)."""
        self._jobs.pop(key, None)
        self._successor.pop(key, None)
        for predecessor in [p for p, s in self._successor.items() if s == key]:
            del self._successor[predecessor]

    def _prefetch(self, job: Job, key: Key, used: _Slot, current: torch.cuda.Stream | None) -> None:
        target = self._spare_slot(used)
        buffer = self._buffer(target, job, current)
        self._claim(target, key)
        self._pending.append(target)
        _queued[self.device] = self
        self.stats.prefetches += 1
        if current is None:
            target.weight = job.run(buffer)
            target.source = _Source.of(job)
            return
        if self._stream is None:
            self._stream = torch.cuda.Stream(self.device)
        side = self._stream
        if target.free is not None:
            side.wait_event(target.free)
        if self.after_gemm and used.free is not None:
            side.wait_event(used.free)
        # set_stream rather than the torch.cuda.stream context: fewer host calls per layer.
        torch.cuda.set_stream(side)
        try:
            target.weight = job.run(buffer)
            target.source = _Source.of(job)
            if target.ready is None:
                target.ready = torch.cuda.Event()
            target.ready.record(side)
        finally:
            torch.cuda.set_stream(current)

    @contextmanager
    def unpacked(self, job: Job) -> Iterator[torch.Tensor]:
        """The job's BF16 weight, ready for the current stream inside the block."""
        key = job.key
        self._learn(key, job)
        current = self._current_stream() if self._on_gpu else None
        slot, weight = self._take(key, job, current)
        try:
            yield weight
        finally:
            if current is not None:
                if slot.free is None:
                    slot.free = torch.cuda.Event()
                slot.free.record(current)
        self._prefetch_successors(key, slot, current)


_per_device: dict[torch.device, UnpackAhead] = {}
_lock = threading.Lock()
# The states with prefetches queued: the op's other paths look here on every call (every decode
# step), so while nothing is queued an empty dict is all they touch.
_queued: dict[torch.device, UnpackAhead] = {}


def for_device(device: torch.device) -> UnpackAhead:
    with _lock:
        state = _per_device.get(device)
        if state is None:
            state = _per_device[device] = UnpackAhead(device)
        return state


def served_elsewhere(weight: torch.Tensor) -> None:
    """The op served the layer with this weight on another path (Marlin, an in-line unpack):
    drop its device's queued prefetches if one is for that layer. O(1) while nothing is queued
    and never synchronises: it runs on every decode call."""
    if not _queued:
        return
    state = _queued.get(weight.device)
    if state is not None:
        state.passed_over(weight.data_ptr())


def reset_all() -> None:
    """Forget learned orders and pending prefetches (tests, or after a model is unloaded)."""
    with _lock:
        _per_device.clear()
        _queued.clear()
