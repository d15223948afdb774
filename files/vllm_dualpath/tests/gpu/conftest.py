"""GPU tests run against the real Marlin ops; anywhere else they skip and say why.

The CPU suite's conftest turns on Triton's interpreter for the whole process. These tests need
the compiled kernels, so run them on their own: `pytest tests/gpu --confcutdir tests/gpu`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

from vllm_dualpath.marlin_reference import MARLIN_LIBRARY_ENV, load_marlin_library


def _kernels_interpreted() -> bool:
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return True
    unpack = sys.modules.get("vllm_dualpath.unpack")
    return unpack is not None and type(unpack._unpack_kernel).__name__ == "InterpretedFunction"


def _skip_reason() -> str | None:
    if not torch.cuda.is_available():
        return "needs a CUDA GPU"
    if _kernels_interpreted():
        return (
            "Triton kernels were loaded in interpreter mode by the CPU suite; run the GPU tests "
            "on their own: pytest tests/gpu --confcutdir tests/gpu"
        )
    if not load_marlin_library():
        return (
            "needs vLLM's Marlin ops: build them with tools/marlin/build.py and point "
            f"{MARLIN_LIBRARY_ENV} at the library (or run where vLLM is installed)"
        )
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = _skip_reason()
    if reason is None:
        return
    marker = pytest.mark.skip(reason=reason)
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here):
            item.add_marker(marker)


@pytest.fixture
def generator() -> torch.Generator:
    """A fresh seed per test: the checks must hold for any input, not one drawn once."""
    gen = torch.Generator(device="cuda")
    gen.seed()
    return gen
