// GEMM: c = alpha * op(a) @ op(b) + beta * c [+ bias on every row], op = transpose when asked. 2-d operands, or 3-d
// with a shared leading batch dimension (batched / strided). Each of a, b, c may be f32, bf16 or
// f16; products accumulate in fp32 and c is rounded once. CPU: OpenBLAS sgemm on operands widened
// to fp32. CUDA: cuBLASLt (ops/cuda/cublaslt.h), deterministic run to run.
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace tidal::ops {

struct GemmOptions {
  bool trans_a = false;
  bool trans_b = false;
  float alpha = 1.0f;
  float beta = 0.0f;  // 1 accumulates into c (parameter gradients); 0 overwrites c, old contents unused
  // fp32 operands through TF32 tensor cores when asked: faster, ~1e-3 relative error. A GPU-only
  // speed knob: the CPU backend ignores it and computes in full fp32.
  bool tf32 = false;
  // When set, c += bias [n] on every row (a Linear's bias), bias of c's dtype. The CPU adds it
  // after the product (c rounded, then the sum rounded: ops::bias_add); the GPU in cuBLASLt's
  // epilogue, saving a pass over c (measured on an H100, a 16-bit c there too can carry the
  // product's own rounding: tests/gpu/test_cuda_gemm.cpp, BiasInTheEpilogue).
  const Tensor* bias = nullptr;
};

// The product's dimensions, checked for every backend: c [batch,] m x n = op(a) m x k @ op(b) k x n.
struct GemmDims {
  std::int64_t batch, m, n, k;
};
GemmDims gemm_dims(const Tensor& c, const Tensor& a, const Tensor& b, const GemmOptions& opt);

namespace cpu {
void gemm(Tensor& c, const Tensor& a, const Tensor& b, const GemmOptions& opt);
}
namespace meta {  // ops/meta/: what the op costs, on meta tensors
void gemm(Tensor& c, const Tensor& a, const Tensor& b, const GemmOptions& opt);
}  // namespace meta
#if TIDAL_CUDA
namespace cuda {
void gemm(Tensor& c, const Tensor& a, const Tensor& b, const GemmOptions& opt);
}
#endif

// a: [m, k] ([k, m] if trans_a), b: [k, n] ([n, k] if trans_b), c: [m, n]; or all with [batch, ...].
inline void gemm(Tensor& c, const Tensor& a, const Tensor& b, const GemmOptions& opt = {}) {
  TIDAL_OPS_DISPATCH(c, gemm, c, a, b, opt);
}

}  // namespace tidal::ops
