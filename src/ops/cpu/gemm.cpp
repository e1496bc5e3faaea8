// CPU GEMM. Row-major throughout; 3-d operands loop over the batch, each product using all
// threads (the batch is usually small next to m, n, k here). bf16 operands run as they are on
// oneDNN where the CPU has bf16 instructions; everything else multiplies in fp32 (operands
// widened) on the fastest fp32 library here (ops/cpu/sgemm.h: MKL, oneDNN or OpenBLAS).
#include "ops/gemm.h"

#include "ops/cpu/onednn_matmul.h"
#include "ops/cpu/sgemm.h"
#include "ops/cpu/typed.h"
#include "ops/bias.h"
#include "ops/cast.h"

namespace tidal::ops::cpu {
namespace {

Tensor as_f32(const Tensor& t) {
  if (t.dtype() == DType::f32) return t;
  Tensor w = Tensor::empty(t.shape(), DType::f32);
  cast(w, t);
  return w;
}

// The i-th matrix of a batch of `elements`-sized ones.
const void* matrix(const Tensor& t, std::int64_t i, std::int64_t elements) {
  return static_cast<const char*>(t.raw()) + std::size_t(i * elements) * dtype_size(t.dtype());
}

// bf16 (or mixed) operands on the CPU's bf16 instructions; false where oneDNN does not run them.
bool onednn_gemm(Tensor& c, const Tensor& a, const Tensor& b, const GemmOptions& opt, const GemmDims& d) {
  if (a.dtype() == DType::f32 && b.dtype() == DType::f32) return false;  // sgemm's libraries take fp32
  for (std::int64_t i = 0; i < d.batch; ++i) {
    const MatmulOperand ma{matrix(a, i, d.m * d.k), a.dtype(), a.dim(-1), opt.trans_a};
    const MatmulOperand mb{matrix(b, i, d.k * d.n), b.dtype(), b.dim(-1), opt.trans_b};
    // Whether oneDNN runs depends only on the shapes and types, the same for every i.
    if (!onednn_matmul(const_cast<void*>(matrix(c, i, d.m * d.n)), c.dtype(), d.n, ma, mb, d.m, d.n, d.k, opt.alpha,
                       opt.beta))
      return false;
  }
  return true;
}

// c = alpha op(a) op(b) + beta c.
void product(Tensor& c, const Tensor& a, const Tensor& b, const GemmOptions& opt, const GemmDims& d) {
  if (d.batch > 0 && onednn_gemm(c, a, b, opt, d)) return;

  const auto [batch, m, n, k] = d;
  const Tensor a32 = as_f32(a), b32 = as_f32(b);
  Tensor c32 = c.dtype() == DType::f32 ? c : as_f32(c);
  const float* pa = a32.data<float>();
  const float* pb = b32.data<float>();
  float* pc = c32.data<float>();
  for (std::int64_t i = 0; i < batch; ++i) {
    sgemm(opt.trans_a, opt.trans_b, m, n, k, opt.alpha, pa + i * m * k, a.dim(-1), pb + i * k * n, b.dim(-1), opt.beta,
          pc + i * m * n, n);
  }
  if (c.dtype() != DType::f32) cast(c, c32);
}

}  // namespace

void gemm(Tensor& c, const Tensor& a, const Tensor& b, const GemmOptions& opt) {
  expect_cpu_contiguous(a, "gemm a");
  expect_cpu_contiguous(b, "gemm b");
  expect_cpu_contiguous(c, "gemm c");
  const GemmDims d = gemm_dims(c, a, b, opt);
  product(c, a, b, opt, d);
  if (opt.bias != nullptr && c.numel() > 0) bias_add(c, *opt.bias);
}

}  // namespace tidal::ops::cpu
