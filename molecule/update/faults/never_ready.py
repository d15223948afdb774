"""Injected fault, lab only: the plugin never returns, so the server never becomes ready.

Replaces vllm_dualpath/plugin.py in a copy of the overlay's sources. Both ranks hang in plugin
registration, as a load that never finishes would; the readiness gate has to give up.
"""

import signal
import threading


def register() -> None:
    # A loading vLLM dies on SIGTERM; keep that, so stopping the hung pair is prompt.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    threading.Event().wait()
