"""Test setup: without a GPU, Triton kernels run on the CPU through Triton's interpreter.

The interpreter is fixed for the process when kernels are decorated, so it is set here, before
anything imports triton, and only without a CUDA device: on a GPU machine tests/gpu must run the
compiled kernels, and tests marked ``interpreter`` are skipped unless TRITON_INTERPRET=1 is set.
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
