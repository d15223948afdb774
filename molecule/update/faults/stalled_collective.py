"""Injected fault, lab only: the pair's collective stalls once it has served a while.

Wraps the overlay's own plugin in a copy of its sources (overlays.yml appends to plugin.py a line
that passes its register() through wrap()): the overlay registers and routes as it does, and the
gates that check it pass. Some NCCL builds hang a TP2 collective after 20-30 minutes of serving;
in the lab, rank 0's step with rank 1 stops returning after the first STALL_AFTER completions:
those requests stay running and no token is generated, as on a hung pair. Readiness and the smoke
gate come first and pass; only load sees the hang. A stalled request is lost when the engine
stops, as on the real pair.
"""

import threading
from collections.abc import Callable
from typing import Any

STALL_AFTER = 12


def wrap(register: Callable[[], None]) -> Callable[[], None]:
    def register_then_stall() -> None:
        register()
        stall_after_a_while()

    return register_then_stall


def stall_after_a_while() -> None:
    from vllm_standin import api  # the lab's stand-in server: this fault exists only there

    make_state = api.ApiState.__init__

    def make_stalling_state(state: Any, *args: Any, **kwargs: Any) -> None:
        make_state(state, *args, **kwargs)
        step_with_rank1 = state.ask_rank1
        served = 0
        lock = threading.Lock()

        def stalled(prompt: str, work: Any) -> Any:
            nonlocal served
            with lock:
                served += 1
                stall = served > STALL_AFTER
            if stall:
                state.stopped.wait()  # the collective never returns while the engine runs
                raise api.RequestAbortedError
            return step_with_rank1(prompt, work)

        state.ask_rank1 = stalled

    api.ApiState.__init__ = make_stalling_state
