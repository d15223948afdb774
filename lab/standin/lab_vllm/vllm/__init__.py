"""The lab's `vllm`: a test double, written for the lab, never vLLM's own code.

The lab has no GPU and cannot install vLLM, yet the dual-path overlay's plugin must find what it
finds in real vLLM and patch it. This package has exactly that surface and nothing else:

* ``model_executor.layers.quantization.utils.marlin_utils_fp8.apply_fp8_marlin_linear`` with
  vLLM 0.34.0's parameters, computing Marlin's arithmetic on the CPU (the overlay tests'
  ``marlin_standin``, copied next to this package when the stand-in image is built);
* ``model_executor.kernels.linear.scaled_mm.marlin.MarlinFP8ScaledMMLinearKernel.apply_weights``
  calling that function by the name it imported, as vLLM 0.34.0 does.

The stand-in server's model (vllm_standin.model) calls ``apply_weights``; the overlay's
``register()`` rebinds the name in both modules. Never installed on a Spark.
"""

# The vLLM release whose FP8 Marlin surface this mirrors (vllm_dualpath.plugin's tested versions).
__version__ = "0.34.0"
