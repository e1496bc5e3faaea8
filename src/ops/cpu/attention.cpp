// CPU attention: one (batch, head) pair per task, each doing its GEMMs with single-threaded
// OpenBLAS calls (the OpenMP build runs sgemm serially inside a parallel region). Q, K and V are
// read in place from qkv with leading dimension 3C; nothing is transposed or copied. bf16 / fp16
// inputs are widened to fp32 copies and the results rounded back (the probabilities stay fp32).
#include "ops/attention.h"

#include "ops/cast.h"

#include "ops/cpu/softmax_row.h"
#include "ops/cpu/typed.h"

#include <cblas.h>

#include <cmath>
#include <vector>

namespace tidal::ops::cpu {
namespace {

using Dims = AttentionDims;

Dims check(const Tensor& qkv, const Tensor& probs, const AttentionOptions& opt) {
  expect_cpu_contiguous(qkv, "attention qkv");
  expect_cpu_contiguous(probs, "attention probs");
  if (opt.key_mask) expect_cpu_contiguous(*opt.key_mask, "attention key_mask");
  return attention_dims(qkv, probs, opt);
}

Tensor widened(const Tensor& t) {
  if (t.dtype() == DType::f32) return t;
  Tensor w = Tensor::empty(t.shape());
  cast(w, t);
  return w;
}

}  // namespace

void attention_forward(Tensor& y, Tensor& probs, const Tensor& qkv, const AttentionOptions& opt) {
  if (qkv.dtype() != DType::f32) {
    TIDAL_ASSERT(y.dtype() == qkv.dtype(), "attention y {} for qkv {}", y.str(), qkv.str());
    Tensor y32 = Tensor::empty(y.shape());
    cpu::attention_forward(y32, probs, widened(qkv), opt);
    cast(y, y32);
    return;
  }
  const Dims d = check(qkv, probs, opt);
  expect_cpu_contiguous(y, "attention y");
  TIDAL_ASSERT(y.shape() == Shape({d.B, d.T, d.C}) && y.dtype() == DType::f32, "attention y {}", y.str());
  const float scale = 1.0f / std::sqrt(float(d.hd));
  const int ld = int(3 * d.C);
  const float* base = qkv.data<float>();
  float* py = y.data<float>();
  float* pp = probs.data<float>();
  const std::int32_t* mask = opt.key_mask ? opt.key_mask->data<std::int32_t>() : nullptr;
#pragma omp parallel
  {
    std::vector<float> scores(std::size_t(d.T * d.T));
#pragma omp for schedule(dynamic)
    for (std::int64_t bh = 0; bh < d.B * d.H; ++bh) {
      const std::int64_t b = bh / d.H, h = bh % d.H;
      const float* q = base + b * d.T * ld + h * d.hd;
      const float* k = q + d.C;
      const float* v = q + 2 * d.C;
      float* p = pp + bh * d.T * d.T;
      // scores = scale * Q K^T  [T, T]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(d.T), int(d.T), int(d.hd), scale, q, ld, k, ld, 0.0f,
                  scores.data(), int(d.T));
      const std::int32_t* mrow = mask ? mask + b * d.T : nullptr;
      for (std::int64_t i = 0; i < d.T; ++i) {
        softmax_row(p + i * d.T, scores.data() + i * d.T, d.T,
                    [&](std::int64_t j) { return (!opt.causal || j <= i) && (!mrow || mrow[j] != 0); });
      }
      // y[b, :, h] = P V  [T, hd]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(d.T), int(d.hd), int(d.T), 1.0f, p, int(d.T), v, ld,
                  0.0f, py + b * d.T * d.C + h * d.hd, int(d.C));
    }
  }
}

void attention_backward(Tensor& dqkv, const Tensor& dy, const Tensor& qkv, const Tensor& probs,
                        const AttentionOptions& opt) {
  if (qkv.dtype() != DType::f32) {
    expect_same(dqkv, qkv, "attention dqkv/qkv");
    Tensor dqkv32 = Tensor::empty(dqkv.shape());
    cpu::attention_backward(dqkv32, widened(dy), widened(qkv), probs, opt);
    cast(dqkv, dqkv32);
    return;
  }
  const Dims d = check(qkv, probs, opt);
  expect_cpu_contiguous(dy, "attention dy");
  expect_cpu_contiguous(dqkv, "attention dqkv");
  expect_same(dqkv, qkv, "attention dqkv/qkv");
  TIDAL_ASSERT(dy.shape() == Shape({d.B, d.T, d.C}) && dy.dtype() == DType::f32, "attention dy {}", dy.str());
  const float scale = 1.0f / std::sqrt(float(d.hd));
  const int ld = int(3 * d.C);
  const float* base = qkv.data<float>();
  float* dbase = dqkv.data<float>();
  const float* pdy = dy.data<float>();
  const float* pp = probs.data<float>();
#pragma omp parallel
  {
    std::vector<float> dp(std::size_t(d.T * d.T));
#pragma omp for schedule(dynamic)
    for (std::int64_t bh = 0; bh < d.B * d.H; ++bh) {
      const std::int64_t b = bh / d.H, h = bh % d.H;
      const float* q = base + b * d.T * ld + h * d.hd;
      const float* k = q + d.C;
      const float* v = q + 2 * d.C;
      float* dq = dbase + b * d.T * ld + h * d.hd;
      float* dk = dq + d.C;
      float* dv = dq + 2 * d.C;
      const float* p = pp + bh * d.T * d.T;
      const float* g = pdy + b * d.T * d.C + h * d.hd;  // dO [T, hd], leading dim C
      // dV = P^T dO
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(d.T), int(d.hd), int(d.T), 1.0f, p, int(d.T), g,
                  int(d.C), 0.0f, dv, ld);
      // dP = dO V^T, then dS = P * (dP - rowsum(dP * P)) in place
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(d.T), int(d.T), int(d.hd), 1.0f, g, int(d.C), v, ld,
                  0.0f, dp.data(), int(d.T));
      for (std::int64_t i = 0; i < d.T; ++i) softmax_row_backward(dp.data() + i * d.T, dp.data() + i * d.T, p + i * d.T, d.T);
      // dQ = scale * dS K ; dK = scale * dS^T Q
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(d.T), int(d.hd), int(d.T), scale, dp.data(), int(d.T),
                  k, ld, 0.0f, dq, ld);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(d.T), int(d.hd), int(d.T), scale, dp.data(), int(d.T),
                  q, ld, 0.0f, dk, ld);
    }
  }
}

}  // namespace tidal::ops::cpu
