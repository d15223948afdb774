// One variant of CUTLASS's Hopper mixed-input GEMM: out[M, N] (BF16, row-major) =
// x[M, K] (BF16, row-major) @ w[N, K]^T (FP8 e4m3, row-major), the weight converted to BF16 in
// registers on its way to the tensor cores, optionally times BF16 group scales along K.
//
// The variant is chosen at compile time (build.py compiles this file once per variant):
//   MIXED_TOKENS_TILE  tokens per CTA tile (128 or 256); the tile takes 128 weight rows
//   MIXED_SCALED       1: each weight element times its group scale; 0: conversion only
//   MIXED_SHUFFLED     1: the weight reordered so each thread's values are contiguous in memory
//   MIXED_NAME         the prefix of the exported C symbols
//
// The narrow operand has to go through registers, so it must be GMMA's A operand: the kernel
// computes out^T = w @ x^T (kernel M = weight rows, kernel N = tokens) and writes it
// column-major, which is out row-major.

#include <cuda_runtime.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/mixed_dtype_utils.hpp"
#include "cutlass/util/packed_stride.hpp"

#if !defined(MIXED_TOKENS_TILE) || !defined(MIXED_SCALED) || !defined(MIXED_SHUFFLED) || \
    !defined(MIXED_NAME)
#error "build.py defines MIXED_TOKENS_TILE, MIXED_SCALED, MIXED_SHUFFLED and MIXED_NAME"
#endif

#define MIXED_JOIN2(a, b) a##_##b
#define MIXED_JOIN(a, b) MIXED_JOIN2(a, b)
#define MIXED_SYMBOL(suffix) MIXED_JOIN(MIXED_NAME, suffix)

namespace {

using namespace cute;

using Activation = cutlass::bfloat16_t;
using Weight = cutlass::float_e4m3_t;
using Scale = cutlass::bfloat16_t;  // the MMA's type: the scaling is one BF16 multiply
using Output = cutlass::bfloat16_t;

// The problem as the caller sees it: x row-major (K-major), w as a column-major K x N operand
// (also K-major), out row-major. The kernel sees the transposes of these.
using XLayout = cutlass::layout::RowMajor;
using WLayout = cutlass::layout::ColumnMajor;
using OutLayout = cutlass::layout::RowMajor;
using XLayoutSwapped = cutlass::layout::LayoutTranspose<XLayout>::type;
using WLayoutSwapped = cutlass::layout::LayoutTranspose<WLayout>::type;
using OutLayoutSwapped = cutlass::layout::LayoutTranspose<OutLayout>::type;
using WStride = cutlass::detail::TagToStrideB_t<WLayout>;

constexpr int kXAlignment = 128 / cutlass::sizeof_bits<Activation>::value;
constexpr int kWAlignment = 128 / cutlass::sizeof_bits<Weight>::value;
constexpr int kOutAlignment = 128 / cutlass::sizeof_bits<Output>::value;

// K per stage: 128 bytes of the wide type, as CUTLASS's mixed-input kernels are tuned for.
constexpr int kTileK = 128 * 8 / cutlass::sizeof_bits<Activation>::value;
using TileShape = Shape<_128, Int<MIXED_TOKENS_TILE>, Int<kTileK>>;
using ClusterShape = Shape<_1, _1, _1>;

// The reordered weight: each thread's values of one MMA atom contiguous (one wide load).
using ShuffleAtom = decltype(cutlass::compute_memory_reordering_atom<Activation>());
using WLayoutShuffled = decltype(tile_to_shape(ShuffleAtom{}, Layout<Shape<int, int, int>, WStride>{}));
using WOperandLayout = std::conditional_t<MIXED_SHUFFLED != 0, WLayoutShuffled, WLayoutSwapped>;
using WOperand = std::conditional_t<MIXED_SCALED != 0, cute::tuple<Weight, Scale>, Weight>;

using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float,
    void, OutLayoutSwapped, kOutAlignment,  // no source C: out = w @ x^T alone
    Output, OutLayoutSwapped, kOutAlignment,
    cutlass::epilogue::TmaWarpSpecializedCooperative>::CollectiveOp;

using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    WOperand, WOperandLayout, kWAlignment,
    Activation, XLayoutSwapped, kXAlignment,
    float, TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<
        static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
    cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;

using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

auto weight_operand_layout(int n, int k) {
  if constexpr (MIXED_SHUFFLED != 0) {
    return tile_to_shape(ShuffleAtom{}, make_shape(n, k, 1));
  } else {
    return cutlass::make_cute_packed_stride(WStride{}, make_shape(n, k, 1));
  }
}

typename Gemm::Arguments arguments(const void* x, const void* w, const void* scales, void* out,
                                   int m, int n, int k, int group) {
  auto x_stride = cutlass::make_cute_packed_stride(
      cutlass::detail::TagToStrideA_t<XLayout>{}, make_shape(m, k, 1));
  auto out_stride = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, make_shape(n, m, 1));
  typename Mainloop::Arguments mainloop{};
  mainloop.ptr_A = static_cast<const Weight*>(w);
  mainloop.dA = weight_operand_layout(n, k);
  mainloop.ptr_B = static_cast<const Activation*>(x);
  mainloop.dB = x_stride;
  if constexpr (MIXED_SCALED != 0) {
    mainloop.ptr_S = static_cast<const Scale*>(scales);
    mainloop.dS = cutlass::make_cute_packed_stride(typename Mainloop::StrideScale{},
                                                   make_shape(n, k / group, 1));
    mainloop.group_size = group;
  }
  typename Epilogue::Arguments epilogue{
      {1.0f, 0.0f}, nullptr, out_stride, static_cast<Output*>(out), out_stride};
  return typename Gemm::Arguments{
      cutlass::gemm::GemmUniversalMode::kGemm, {n, m, k, 1}, mainloop, epilogue};
}

}  // namespace

extern "C" {

// Bytes of device workspace a call of this shape needs.
size_t MIXED_SYMBOL(workspace)(int m, int n, int k, int group) {
  return Gemm::get_workspace_size(arguments(nullptr, nullptr, nullptr, nullptr, m, n, k, group));
}

// out = x @ (w * scales)^T on `stream`; returns a cutlass::Status (0: launched).
int MIXED_SYMBOL(run)(const void* x, const void* w, const void* scales, void* out, int m, int n,
                      int k, int group, void* workspace, void* stream) {
  auto args = arguments(x, w, scales, out, m, n, k, group);
  Gemm gemm;
  cutlass::Status status = gemm.can_implement(args);
  if (status != cutlass::Status::kSuccess) {
    return static_cast<int>(status);
  }
  status = gemm.initialize(args, workspace, static_cast<cudaStream_t>(stream));
  if (status != cutlass::Status::kSuccess) {
    return static_cast<int>(status);
  }
  return static_cast<int>(gemm.run(static_cast<cudaStream_t>(stream)));
}

// Copies the row-major weight [N, K] into the layout this variant reads (a plain copy when the
// variant is not shuffled). Synchronous.
int MIXED_SYMBOL(prepare_weight)(const void* src, void* dst, int n, int k) {
  auto plain = make_layout(make_shape(n, k, 1), cutlass::make_cute_packed_stride(WStride{}, make_shape(n, k, 1)));
  if constexpr (MIXED_SHUFFLED != 0) {
    cutlass::reorder_tensor(static_cast<const Weight*>(src), plain, static_cast<Weight*>(dst),
                            weight_operand_layout(n, k));
  } else {
    if (cudaMemcpy(dst, src, static_cast<size_t>(n) * k, cudaMemcpyDeviceToDevice) != cudaSuccess) {
      return static_cast<int>(cutlass::Status::kErrorInternal);
    }
  }
  return static_cast<int>(cudaDeviceSynchronize() == cudaSuccess ? cutlass::Status::kSuccess
                                                                 : cutlass::Status::kErrorInternal);
}

const char* MIXED_SYMBOL(status_string)(int status) {
  return cutlassGetStatusString(static_cast<cutlass::Status>(status));
}

}  // extern "C"
