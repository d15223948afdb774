"""Test setup: without a GPU, Triton kernels run on the CPU through Triton's interpreter.

The interpreter is chosen when kernels are decorated, for the whole process, so it is switched
on here (before anything imports triton) only where there is no CUDA device: on a GPU machine
the compiled kernels are what tests/gpu must exercise. Tests that run kernels on CPU tensors
carry the ``interpreter`` marker and are skipped there, saying so; set TRITON_INTERPRET=1
yourself to run them on a GPU machine anyway.
"""

from __future__ import annotations

import os

import pytest
import torch

INTERPRETER = "TRITON_INTERPRET"

if INTERPRETER not in os.environ and not torch.cuda.is_available():
    os.environ[INTERPRETER] = "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(INTERPRETER) == "1":
        return
    skip = pytest.mark.skip(
        reason=f"runs Triton kernels on CPU tensors: needs {INTERPRETER}=1, which is only set "
        "automatically without a GPU (tests/gpu runs the compiled kernels)"
    )
    for item in items:
        if item.get_closest_marker("interpreter") is not None:
            item.add_marker(skip)


@pytest.fixture
def marlin():
    """The Marlin stand-in installed as the op's small-M path, the op's state fresh around it."""
    # Imported here: the op imports Triton, which must see TRITON_INTERPRET set above first.
    from marlin_standin import MarlinStandIn
    from vllm_dualpath import ahead, op, scratch, settings

    standin = MarlinStandIn()
    op.install_marlin_apply(standin)
    op.configure(settings.load({}), None)
    scratch.release_all()
    ahead.reset_all()
    yield standin
    op.install_marlin_apply(None)
    op.configure(settings.load({}), None)
    scratch.release_all()
    ahead.reset_all()
