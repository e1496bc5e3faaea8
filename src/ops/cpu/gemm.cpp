// CPU GEMM through OpenBLAS. Row-major throughout; 3-d operands loop over the batch, each
// sgemm using all threads (the batch is usually small next to m, n, k here).
#include "ops/gemm.h"

#include "ops/cpu/typed.h"
#include "ops/cast.h"

#include <cblas.h>

namespace tidal::ops::cpu {
namespace {

Tensor as_f32(const Tensor& t) {
  if (t.dtype() == DType::f32) return t;
  Tensor w = Tensor::empty(t.shape(), DType::f32);
  cast(w, t);
  return w;
}

}  // namespace

void gemm(Tensor& c, const Tensor& a, const Tensor& b, const GemmOptions& opt) {
  expect_cpu_contiguous(a, "gemm a");
  expect_cpu_contiguous(b, "gemm b");
  expect_cpu_contiguous(c, "gemm c");
  const auto [batch, m, n, k] = gemm_dims(c, a, b, opt);

  const Tensor a32 = as_f32(a), b32 = as_f32(b);
  Tensor c32 = c.dtype() == DType::f32 ? c : as_f32(c);
  const float* pa = a32.data<float>();
  const float* pb = b32.data<float>();
  float* pc = c32.data<float>();
  for (std::int64_t i = 0; i < batch; ++i) {
    cblas_sgemm(CblasRowMajor, opt.trans_a ? CblasTrans : CblasNoTrans, opt.trans_b ? CblasTrans : CblasNoTrans,
                int(m), int(n), int(k), opt.alpha, pa + i * m * k, int(a.dim(-1)), pb + i * k * n, int(b.dim(-1)),
                opt.beta, pc + i * m * n, int(n));
  }
  if (c.dtype() != DType::f32) cast(c, c32);
}

}  // namespace tidal::ops::cpu
