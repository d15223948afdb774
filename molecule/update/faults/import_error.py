"""Injected fault, lab only: the overlay's plugin module cannot be imported.

Replaces vllm_dualpath/plugin.py in a copy of the overlay's sources. vLLM (and the lab's
stand-in) only logs a plugin that fails to import and serves without it: the readiness gate,
which checks that every required plugin was loaded, has to catch it.
"""

raise ImportError("injected fault: vllm_dualpath.plugin cannot be imported")
