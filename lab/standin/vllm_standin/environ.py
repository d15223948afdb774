"""vLLM's check of its VLLM_* environment, run where vLLM runs it: building the engine config.

Restated from `Platform.validate_environ` (vllm/platforms/interface.py, 0.34.0 lines 1475-1502,
called from EngineArgs.create_engine_config on every node): a removed variable is fatal; a
VLLM_* name vLLM does not know draws a warning, or is fatal under --fail-on-environ-validation.
The known and removed names come from the spec (vllm/envs.py's environment_variables and
removed_environment_variables), so a misspelt variable in the service's env file shows up in the
lab exactly as it would on a Spark.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

logger = logging.getLogger("vllm.platforms.interface")


def validate_environ(env: Mapping[str, str], spec: Mapping[str, Any], hard_fail: bool) -> None:
    """Raise ValueError where vLLM raises; log vLLM's warning where it warns."""
    known = set(spec["environment_variables"])
    unknown = spec["unknown_environment_variable_message"]  # vLLM's own text, from its source
    removed: Mapping[str, str] = spec["removed_environment_variables"]
    for name, value in env.items():
        if name == "VLLM_USE_V2_MODEL_RUNNER":  # special-cased by name in vLLM itself
            if value != "1":
                raise ValueError(f"VLLM_USE_V2_MODEL_RUNNER={value}: V1 is gone; unset it")
            logger.warning("VLLM_USE_V2_MODEL_RUNNER=1 changes nothing any more; unset it")
            continue
        if hint := removed.get(name):
            raise ValueError(f"{name} has been removed. {hint}")
        if name.startswith("VLLM_") and name not in known:
            if hard_fail:
                raise ValueError(unknown % name)
            logger.warning(unknown, name)
