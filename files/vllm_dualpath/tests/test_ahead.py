"""Unpack ahead on the CPU: learned order, hits and misses, never a stale or wrong weight."""

from __future__ import annotations

import gc
import itertools
import weakref

import pytest
import torch

from fp8_cases import Case, bits, build
from marlin_standin import MarlinStandIn
from vllm_dualpath import ahead, op, scratch, settings, unpack

pytestmark = pytest.mark.interpreter

CPU = torch.device("cpu")
SHAPES = [Case(128, 256, "block"), Case(64, 128, "channel"), Case(192, 128, "block")]


@pytest.fixture(autouse=True)
def _fresh():
    scratch.release_all()
    ahead.reset_all()
    yield
    scratch.release_all()
    ahead.reset_all()


def _jobs() -> list[ahead.Job]:
    jobs = []
    for index, case in enumerate(SHAPES):
        _, packed, stored, _ = build(Case(case.size_n, case.size_k, case.scales, seed=index))
        jobs.append(ahead.Job(packed, stored, case.size_n, case.size_k))
    return jobs


def _plain(job: ahead.Job) -> torch.Tensor:
    return unpack.unpack_weight(job.weight, job.scales, job.size_n, job.size_k)


def _forward(state: ahead.UnpackAhead, jobs: list[ahead.Job]) -> list[torch.Tensor]:
    seen = []
    for job in jobs:
        with state.unpacked(job) as weight:
            seen.append(weight.clone())
    return seen


def test_first_pass_learns_later_passes_hit_every_layer_but_the_first():
    jobs = _jobs()
    state = ahead.for_device(CPU)
    expected = [_plain(job) for job in jobs]
    for forward in range(3):
        got = _forward(state, jobs)
        for g, e in zip(got, expected, strict=True):
            assert torch.equal(g.view(torch.int16), e.view(torch.int16))
        if forward == 0:
            assert (state.stats.hits, state.stats.misses, state.stats.prefetches) == (0, 3, 0)
    # Passes two and three: the first layer misses (nothing crosses a pass), the others hit.
    assert (state.stats.hits, state.stats.misses, state.stats.prefetches) == (4, 5, 4)


def test_consecutive_layers_never_share_a_slot():
    jobs = _jobs()
    state = ahead.for_device(CPU)
    _forward(state, jobs)
    pointers = []
    for job in jobs:
        with state.unpacked(job) as weight:
            pointers.append(weight.data_ptr())
    assert all(a != b for a, b in itertools.pairwise(pointers))


def test_a_call_off_the_learned_order_unpacks_its_own_weight():
    jobs = _jobs()
    state = ahead.for_device(CPU)
    _forward(state, jobs)
    _forward(state, [jobs[0], jobs[2], jobs[1]])  # layer 1 was prefetched, layer 2 came
    got = _forward(state, [jobs[0], jobs[2], jobs[1]])
    for job, weight in zip([jobs[0], jobs[2], jobs[1]], got, strict=True):
        assert torch.equal(weight.view(torch.int16), _plain(job).view(torch.int16))
    assert state.stats.misses >= 5


def test_weights_changed_between_passes_are_never_served_stale():
    jobs = _jobs()
    state = ahead.for_device(CPU)
    _forward(state, jobs)
    _forward(state, jobs)
    for job in jobs:
        job.weight.copy_(job.weight.roll(1, dims=1))  # in place, as a weight reload would
    got = _forward(state, jobs)
    for job, weight in zip(jobs, got, strict=True):
        assert torch.equal(weight.view(torch.int16), _plain(job).view(torch.int16))


def test_a_prefetch_of_a_weight_changed_in_place_since_is_not_used():
    """Within a pass, as no loader would: what the weight's version counter sees is enough."""
    jobs = _jobs()
    state = ahead.for_device(CPU)
    _forward(state, jobs)
    with state.unpacked(jobs[0]):
        pass  # prefetches jobs[1]
    jobs[1].weight.copy_(jobs[1].weight.roll(1, dims=1))
    with state.unpacked(jobs[1]) as weight:
        assert torch.equal(bits(weight), bits(_plain(jobs[1])))
    assert state.stats.hits == 0


def test_weights_made_in_inference_mode_are_prefetched_and_exact():
    """vLLM runs its forward under torch.inference_mode; weights made there keep no version
    counter, so the very tensors read are what a hit needs."""
    with torch.inference_mode():
        jobs = [ahead.Job(j.weight.clone(), j.scales.clone(), j.size_n, j.size_k) for j in _jobs()]
    assert all(j.weight.is_inference() for j in jobs)
    state = ahead.for_device(CPU)
    expected = [_plain(job) for job in jobs]
    with torch.inference_mode():
        for _ in range(2):
            for g, e in zip(_forward(state, jobs), expected, strict=True):
                assert torch.equal(bits(g), bits(e))
    assert state.stats.hits == 2
    with state.unpacked(jobs[0]):
        pass  # prefetches jobs[1]
    _reload_over_the_same_memory(state, jobs[1], inference=True)
    assert state.stats.hits == 2


def test_a_new_tensor_at_a_prefetched_weights_address_is_unpacked_afresh():
    """A tensor over the same memory (``.data``, or a reload at a reused address) is not the one
    the prefetch read, whatever the address says."""
    jobs = _jobs()
    state = ahead.for_device(CPU)
    _forward(state, jobs)
    with state.unpacked(jobs[0]):
        pass  # prefetches jobs[1]
    _reload_over_the_same_memory(state, jobs[1])
    assert state.stats.hits == 0


def _reload_over_the_same_memory(state: ahead.UnpackAhead, job: ahead.Job, inference=False):
    """Write a changed weight through ``.data`` (same address, another tensor, with a version
    counter of its own unless an inference tensor) and check the call unpacks what it holds."""
    with torch.inference_mode(inference):
        fresh = job.weight.data
        fresh.copy_(fresh.roll(1, dims=1))
    reloaded = ahead.Job(fresh, job.scales, job.size_n, job.size_k)
    assert reloaded.key == job.key
    with state.unpacked(reloaded) as weight:
        assert torch.equal(bits(weight), bits(_plain(reloaded)))


def _op_call(layer, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    _, packed, stored, _ = layer
    x = torch.randn(m, 128, generator=torch.Generator().manual_seed(m)).to(torch.bfloat16)
    return x, torch.ops.dualpath.fp8_marlin_linear(x, packed, stored, None, 64, 128, None, True)


@pytest.fixture
def op_on_cpu():
    op.install_marlin_apply(MarlinStandIn())
    op.configure(settings.load({}), None)
    yield
    op.install_marlin_apply(None)
    op.configure(settings.load({}), None)


def test_a_prefetch_is_dropped_when_its_layer_comes_on_another_path(op_on_cpu):
    """The predicted layer served by Marlin leaves no prefetch for a later pass to take, even
    when its weight then changes where no version counter sees it (``param.data.copy_``)."""
    first, second = (build(Case(64, 128, "channel", seed=seed)) for seed in (1, 2))
    _op_call(first, 2048)
    _op_call(second, 2048)  # learns first -> second
    _op_call(first, 2048)  # prefetches second
    state = ahead.for_device(CPU)
    assert len(state._pending) == 1
    _op_call(second, 4)  # on Marlin: the prefetch is of no use now
    assert not state._pending
    _, packed, stored, _ = second
    packed.data.copy_(packed.roll(1, dims=1))  # between passes, as a weight update does
    x, out = _op_call(second, 2048)
    in_line = op.unpack_linear(x, packed, stored, 64, 128, None, None, "epilogue")
    assert torch.equal(out, in_line)
    assert (state.stats.prefetches, state.stats.hits) == (1, 0)


def test_the_other_paths_touch_no_ahead_state_while_nothing_is_queued(op_on_cpu, monkeypatch):
    """Decode calls (Marlin) and in-line unpacks pay one check that nothing is queued."""
    op.configure(settings.load({"DUALPATH_UNPACK_AHEAD_MIN_M": "4096"}), None)
    layer = build(Case(64, 128, "channel", seed=1))
    _op_call(layer, 4096)  # a pass of one layer: nothing is predicted after it

    def no_lookup(device: torch.device) -> ahead.UnpackAhead:
        raise AssertionError("a call off the ahead path looked the ahead state up")

    monkeypatch.setattr(ahead, "for_device", no_lookup)
    _op_call(layer, 4)  # Marlin
    _op_call(layer, 2048)  # unpacked in line


def test_a_layer_whose_tensors_are_gone_is_forgotten_by_every_predecessor():
    first, second, third = _jobs()
    state = ahead.for_device(CPU)
    _forward(state, [first, second, third])  # first -> second -> third
    _forward(state, [first, third])  # first -> third; second -> third is kept
    gone = weakref.ref(third.weight)
    del third
    gc.collect()
    assert gone() is None
    case = SHAPES[2]
    _, packed, stored, _ = build(Case(case.size_n, case.size_k, case.scales, seed=7))
    replacement = ahead.Job(packed, stored, case.size_n, case.size_k)
    jobs = [first, second, replacement]
    for job, weight in zip(jobs, _forward(state, jobs), strict=True):
        assert torch.equal(bits(weight), bits(_plain(job)))


def test_a_dropped_layer_is_neither_kept_alive_nor_prefetched():
    jobs = _jobs()
    state = ahead.for_device(CPU)
    _forward(state, jobs)
    gone = weakref.ref(jobs[1].weight)
    survivors = [jobs[0], jobs[2]]
    del jobs
    gc.collect()
    assert gone() is None  # what the state learned does not hold the weight
    got = _forward(state, survivors)
    for job, weight in zip(survivors, got, strict=True):
        assert torch.equal(weight.view(torch.int16), _plain(job).view(torch.int16))


@pytest.mark.parametrize(("enabled", "ahead_calls"), [(True, 1), (False, 0)])
def test_the_op_unpacks_ahead_from_its_threshold_when_enabled(enabled, ahead_calls):
    op.install_marlin_apply(MarlinStandIn())
    env = {"DUALPATH_UNPACK_AHEAD": str(enabled).lower(), "DUALPATH_UNPACK_AHEAD_MIN_M": "1100"}
    op.configure(settings.load(env), None)
    case = SHAPES[0]
    _, packed, stored, _ = build(case)
    try:
        for m in (1024, 1100):  # both on the unpack path; only 1100 reaches the ahead threshold
            x = torch.randn(m, case.size_k).to(torch.bfloat16)
            torch.ops.dualpath.fp8_marlin_linear(
                x, packed, stored, None, case.size_n, case.size_k, None, True
            )
    finally:
        op.install_marlin_apply(None)
        op.configure(settings.load({}), None)
    stats = ahead.for_device(CPU).stats
    assert stats.hits + stats.misses == ahead_calls
    # The plain slot is grown either way: CUDA graphs captured later unpack into it.
    assert scratch.capacity(CPU) >= case.size_n * case.size_k
    assert (scratch.capacity(CPU, scratch.AHEAD_SLOTS[0]) > 0) == enabled


def _four_jobs() -> list[ahead.Job]:
    cases = [*SHAPES, Case(64, 256, "block")]
    jobs = []
    for index, case in enumerate(cases):
        _, packed, stored, _ = build(Case(case.size_n, case.size_k, case.scales, seed=10 + index))
        jobs.append(ahead.Job(packed, stored, case.size_n, case.size_k))
    return jobs


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_deeper_prefetch_hits_the_same_layers_with_depth_plus_one_slots(depth):
    jobs = _four_jobs()
    state = ahead.for_device(CPU)
    state.depth = depth
    expected = [_plain(job) for job in jobs]
    for _ in range(3):
        got = _forward(state, jobs)
        for g, e in zip(got, expected, strict=True):
            assert torch.equal(g.view(torch.int16), e.view(torch.int16))
    # After the learning pass, every layer but a pass's first is a hit, at any depth.
    assert (state.stats.hits, state.stats.misses) == (6, 6)
    # The first call of a pass queues `depth` layers (as many as the pass has left); each hit
    # tops the queue up by one while layers remain.
    assert state.stats.prefetches == 6
    used = [slot for slot in scratch.AHEAD_SLOTS if scratch.capacity(CPU, slot) > 0]
    assert used == list(scratch.AHEAD_SLOTS[: depth + 1])


def test_two_ahead_never_writes_a_slot_the_next_two_layers_read():
    jobs = _four_jobs()
    state = ahead.for_device(CPU)
    state.depth = 2
    _forward(state, jobs)
    for _ in range(2):
        pointers = []
        for job in jobs:
            with state.unpacked(job) as weight:
                pointers.append(weight.data_ptr())
        windows = zip(pointers, pointers[1:], pointers[2:], strict=False)
        assert all(len(set(window)) == 3 for window in windows)


def test_a_miss_two_ahead_drops_both_predictions_and_stays_exact():
    jobs = _four_jobs()
    state = ahead.for_device(CPU)
    state.depth = 2
    _forward(state, jobs)
    order = [jobs[0], jobs[2], jobs[1], jobs[3]]  # jobs 1 and 2 were queued, 2 came first
    for _ in range(2):
        got = _forward(state, order)
        for job, weight in zip(order, got, strict=True):
            assert torch.equal(weight.view(torch.int16), _plain(job).view(torch.int16))
    assert state.stats.misses >= 7


class _StreamStandIn:
    """Stands in for a torch.cuda.Stream on this CPU machine: records the streams it waits for."""

    def __init__(self, handle: int) -> None:
        self.handle = handle
        self.waited_for: list[int] = []

    def wait_stream(self, other: _StreamStandIn) -> None:
        self.waited_for.append(other.handle)


def test_calls_from_another_stream_first_wait_for_the_previous_one(monkeypatch):
    """The slots are reused in the order of one stream: a call from another stream must not
    rewrite one that the previous stream may still read."""
    current = {"handle": 7}
    monkeypatch.setattr(
        torch._C, "_cuda_getCurrentRawStream", lambda index: current["handle"], raising=False
    )
    monkeypatch.setattr(
        torch.cuda, "current_stream", lambda device: _StreamStandIn(current["handle"])
    )
    state = ahead.UnpackAhead(CPU)
    first = state._current_stream()
    assert state._current_stream() is first and first.waited_for == []
    current["handle"] = 8
    second = state._current_stream()
    assert second.waited_for == [7]
    assert state.stats.stream_switches == 1


def test_an_unsupported_depth_is_refused():
    with pytest.raises(ValueError, match=r"depth must be 1\.\.3"):
        ahead.UnpackAhead(CPU, depth=4)
