"""GPU tests run against the real Marlin ops; anywhere else they skip and say why."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from vllm_dualpath.marlin_reference import MARLIN_LIBRARY_ENV, load_marlin_library


def _skip_reason() -> str | None:
    if not torch.cuda.is_available():
        return "needs a CUDA GPU"
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
