"""Test setup: Triton kernels run on the CPU through Triton's interpreter."""

import os

# Must be set before triton is imported anywhere in the test process.
os.environ["TRITON_INTERPRET"] = "1"
