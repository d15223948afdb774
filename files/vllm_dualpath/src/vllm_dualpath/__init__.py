"""Dual-path FP8 weight-only linear for vLLM.

Decode-sized calls keep vLLM's Marlin W8A16 kernel; prefill-sized calls unpack the Marlin-packed
FP8 weight to BF16 in one Triton pass and run cuBLAS. Importing this package is cheap and never
touches CUDA: vLLM loads the plugin in its API server process too.
"""

__version__ = "0.1.0"
