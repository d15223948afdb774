"""Injected fault, lab only: the pair serves, but its completions are wrong.

Replaces vllm_dualpath/plugin.py in a copy of the overlay's sources. A broken kernel gives a
server that is up and answers nonsense; in the lab the plugin makes the stand-in server answer
a wrong number. Readiness passes; the smoke test has to catch it.
"""

from typing import Any


def register() -> None:
    from vllm_standin import api  # the lab's stand-in server: this fault exists only there

    answer = api.complete

    def wrong(state: Any, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        status, body = answer(state, request)
        if status == 200:
            body["choices"][0]["text"] = " 5"
        return status, body

    api.complete = wrong
