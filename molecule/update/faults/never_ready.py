"""Injected fault, lab only: the plugin never returns, so the server never becomes ready.

Replaces vllm_dualpath/plugin.py in a copy of the overlay's sources. Both ranks hang in plugin
registration, as a load that never finishes would; the readiness gate has to give up.
"""

import os
import signal


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    os._exit(128 + signum)


def register() -> None:
    # A loading vLLM dies on SIGTERM. The server is its container's PID 1, for which the kernel
    # ignores a signal left at its default action: exit from a handler, so stopping stays prompt.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    while True:
        signal.pause()
