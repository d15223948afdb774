"""The all-reduce stand-in of the decoder-step benchmark: holds its stream, leaves the GPU free."""

from __future__ import annotations

import torch

import step_work


def _timed_us(call) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3


def test_link_wait_holds_its_stream_for_its_time() -> None:
    wait = step_work.LinkWait(300.0)
    wait()  # compiles, then launches through Triton's dispatch
    torch.cuda.synchronize()
    for _ in range(3):  # launched directly from now on
        assert 300.0 <= _timed_us(wait) < 1000.0
    assert 3000.0 <= _timed_us(step_work.LinkWait(3000.0)) < 4000.0


def test_other_streams_run_while_it_holds() -> None:
    wait = step_work.LinkWait(5000.0)
    wait()
    x = torch.zeros(1 << 20, device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # loads the kernel first: that alone can take milliseconds
        x.add_(1.0)
    torch.cuda.synchronize()
    held, ended, side_done = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    held.record()
    wait()
    ended.record()
    side.wait_event(held)
    with torch.cuda.stream(side):
        for _ in range(20):
            x.add_(1.0)
        side_done.record()
    torch.cuda.synchronize()
    assert torch.equal(x, torch.full_like(x, 21.0))
    assert held.elapsed_time(side_done) < held.elapsed_time(ended)
