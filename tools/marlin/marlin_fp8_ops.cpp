// Schemas of the two Marlin ops the FP8 weight-only path needs, as vLLM declares them in its
// own bindings (namespace _C, so callers use torch.ops._C.* exactly as inside vLLM). The
// implementations come from vLLM's marlin.cu and gptq_marlin_repack.cu, compiled next to this.
#include <torch/csrc/stable/library.h>

STABLE_TORCH_LIBRARY_FRAGMENT(_C, ops) {
  ops.def(
      "marlin_gemm(Tensor a, Tensor? c_or_none, Tensor b_q_weight, "
      "Tensor? b_bias_or_none,Tensor b_scales, "
      "Tensor? a_scales, Tensor? global_scale, Tensor? b_zeros_or_none, "
      "Tensor workspace, int b_type_id, "
      "SymInt size_m, SymInt size_n, SymInt size_k, "
      "bool use_atomic_add, bool use_fp32_reduce, bool is_zp_float) -> Tensor");
  ops.def(
      "gptq_marlin_repack(Tensor b_q_weight, "
      "SymInt size_k, SymInt size_n, int num_bits, bool is_a_8bit) -> Tensor");
}
