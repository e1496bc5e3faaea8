// GEMM: c = alpha * op(a) @ op(b) + beta * c, op = transpose when asked. 2-d operands, or 3-d
// with a shared leading batch dimension (batched / strided). CPU: OpenBLAS sgemm; bf16 / fp16
// operands are widened to fp32 and the result rounded back.
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace tidal::ops {

struct GemmOptions {
  bool trans_a = false;
  bool trans_b = false;
  float alpha = 1.0f;
  float beta = 0.0f;  // 1 accumulates into c (parameter gradients)
};

namespace cpu {
void gemm(Tensor& c, const Tensor& a, const Tensor& b, const GemmOptions& opt);
}

// a: [m, k] ([k, m] if trans_a), b: [k, n] ([n, k] if trans_b), c: [m, n]; or all with [batch, ...].
inline void gemm(Tensor& c, const Tensor& a, const Tensor& b, const GemmOptions& opt = {}) {
  TIDAL_OPS_DISPATCH(c, gemm, c, a, b, opt);
}

}  // namespace tidal::ops
