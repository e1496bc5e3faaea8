// CPU attention, flash-style (FlashAttention-2's schedule on the CPU): a task takes a block of
// queries of one (batch, head) pair against every key it may attend, so the scores of only
// kQueryBlock rows are ever held (per thread), never the [T, T] matrix. Each block's products
// are single-threaded OpenBLAS GEMMs (the OpenMP build runs sgemm serially inside a parallel
// region) reading Q, K and V in place from qkv with leading dimension 3C. Under the causal mask a
// block stops at its last query's key, which halves the work. bf16 / fp16 inputs are widened to
// fp32 copies and the results rounded back once.
#include "ops/attention.h"

#include "ops/cast.h"

#include "ops/cpu/softmax_row.h"
#include "ops/cpu/typed.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace tidal::ops::cpu {
namespace {

using Dims = AttentionDims;

// Query rows per block: the scores scratch is kQueryBlock x T per thread.
constexpr std::int64_t kQueryBlock = 64;

Dims check(const Tensor& qkv, const Tensor& lse, const AttentionOptions& opt) {
  expect_cpu_contiguous(qkv, "attention qkv");
  expect_cpu_contiguous(lse, "attention lse");
  if (opt.key_mask) expect_cpu_contiguous(*opt.key_mask, "attention key_mask");
  return attention_dims(qkv, lse, opt);
}

Tensor widened(const Tensor& t) {
  if (t.dtype() == DType::f32) return t;
  Tensor w = Tensor::empty(t.shape());
  cast(w, t);
  return w;
}

// The keys a block of queries [i0, i1) may attend: [0, keys_for(i1)).
std::int64_t keys_for(const Dims& d, const AttentionOptions& opt, std::int64_t i1) { return opt.causal ? i1 : d.T; }

}  // namespace

void attention_forward(Tensor& y, Tensor& lse, const Tensor& qkv, const AttentionOptions& opt) {
  if (qkv.dtype() != DType::f32) {
    TIDAL_ASSERT(y.dtype() == qkv.dtype(), "attention y {} for qkv {}", y.str(), qkv.str());
    Tensor y32 = Tensor::empty(y.shape());
    cpu::attention_forward(y32, lse, widened(qkv), opt);
    cast(y, y32);
    return;
  }
  const Dims d = check(qkv, lse, opt);
  expect_cpu_contiguous(y, "attention y");
  TIDAL_ASSERT(y.shape() == Shape({d.B, d.T, d.C}) && y.dtype() == DType::f32, "attention y {}", y.str());
  const float scale = 1.0f / std::sqrt(float(d.hd));
  const int ld = int(3 * d.C);
  const float* base = qkv.data<float>();
  float* py = y.data<float>();
  float* pl = lse.data<float>();
  const std::int32_t* mask = opt.key_mask ? opt.key_mask->data<std::int32_t>() : nullptr;
  const std::int64_t blocks = (d.T + kQueryBlock - 1) / kQueryBlock;
#pragma omp parallel
  {
    std::vector<float> scores(std::size_t(std::min(d.T, kQueryBlock) * d.T));
#pragma omp for schedule(dynamic)
    for (std::int64_t task = 0; task < d.B * d.H * blocks; ++task) {
      const std::int64_t bh = task / blocks, b = bh / d.H, h = bh % d.H;
      const std::int64_t i0 = task % blocks * kQueryBlock, i1 = std::min(d.T, i0 + kQueryBlock), rows = i1 - i0;
      const std::int64_t keys = keys_for(d, opt, i1);
      const float* q = base + (b * d.T + i0) * ld + h * d.hd;
      const float* k = base + b * d.T * ld + d.C + h * d.hd;
      const float* v = k + d.C;
      // S = scale * Q_blk K^T  [rows, keys], then P = softmax(S) in place, remembering each row's lse
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(keys), int(d.hd), scale, q, ld, k, ld, 0.0f,
                  scores.data(), int(keys));
      const std::int32_t* mrow = mask ? mask + b * d.T : nullptr;
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t i = i0 + r;
        pl[bh * d.T + i] = softmax_row(scores.data() + r * keys, scores.data() + r * keys, keys, [&](std::int64_t j) {
          return (!opt.causal || j <= i) && (!mrow || mrow[j] != 0);
        });
      }
      // Y_blk = P V  [rows, hd]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(d.hd), int(keys), 1.0f, scores.data(),
                  int(keys), v, ld, 0.0f, py + (b * d.T + i0) * d.C + h * d.hd, int(d.C));
    }
  }
}

void attention_backward(Tensor& dqkv, const Tensor& dy, const Tensor& qkv, const Tensor& y, const Tensor& lse,
                        const AttentionOptions& opt) {
  if (qkv.dtype() != DType::f32) {
    expect_same(dqkv, qkv, "attention dqkv/qkv");
    Tensor dqkv32 = Tensor::empty(dqkv.shape());
    cpu::attention_backward(dqkv32, widened(dy), widened(qkv), widened(y), lse, opt);
    cast(dqkv, dqkv32);
    return;
  }
  const Dims d = check(qkv, lse, opt);
  expect_cpu_contiguous(dy, "attention dy");
  expect_cpu_contiguous(y, "attention y");
  expect_cpu_contiguous(dqkv, "attention dqkv");
  expect_same(dqkv, qkv, "attention dqkv/qkv");
  TIDAL_ASSERT(dy.shape() == Shape({d.B, d.T, d.C}) && dy.dtype() == DType::f32, "attention dy {}", dy.str());
  TIDAL_ASSERT(y.shape() == dy.shape() && y.dtype() == DType::f32, "attention y {}", y.str());
  const float scale = 1.0f / std::sqrt(float(d.hd));
  const int ld = int(3 * d.C);
  const float* base = qkv.data<float>();
  float* dbase = dqkv.data<float>();
  const float* pdy = dy.data<float>();
  const float* py = y.data<float>();
  const float* pl = lse.data<float>();
  const std::int32_t* mask = opt.key_mask ? opt.key_mask->data<std::int32_t>() : nullptr;
  const std::int64_t rows_max = std::min(d.T, kQueryBlock);
  // A task is a (batch, head) pair: dK and dV sum over its query blocks in order (deterministic).
#pragma omp parallel
  {
    std::vector<float> p(std::size_t(rows_max * d.T)), dp(p.size()), rowdot(static_cast<std::size_t>(rows_max));
#pragma omp for schedule(dynamic)
    for (std::int64_t bh = 0; bh < d.B * d.H; ++bh) {
      const std::int64_t b = bh / d.H, h = bh % d.H;
      const float* q = base + b * d.T * ld + h * d.hd;
      const float* k = q + d.C;
      const float* v = q + 2 * d.C;
      float* dq = dbase + b * d.T * ld + h * d.hd;
      float* dk = dq + d.C;
      float* dv = dq + 2 * d.C;
      const float* o = py + b * d.T * d.C + h * d.hd;   // O [T, hd], leading dim C
      const float* g = pdy + b * d.T * d.C + h * d.hd;  // dO [T, hd], leading dim C
      const std::int32_t* mrow = mask ? mask + b * d.T : nullptr;
      for (std::int64_t j = 0; j < d.T; ++j) {
        std::fill_n(dk + j * ld, d.hd, 0.0f);
        std::fill_n(dv + j * ld, d.hd, 0.0f);
      }
      for (std::int64_t i0 = 0; i0 < d.T; i0 += kQueryBlock) {
        const std::int64_t i1 = std::min(d.T, i0 + kQueryBlock), rows = i1 - i0, keys = keys_for(d, opt, i1);
        const float* qb = q + i0 * ld;
        const float* gb = g + i0 * d.C;
        // P = exp(scale * Q_blk K^T - lse), recomputed
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(keys), int(d.hd), scale, qb, ld, k, ld, 0.0f,
                    p.data(), int(keys));
        for (std::int64_t r = 0; r < rows; ++r) {
          const std::int64_t i = i0 + r;
          const float l = pl[bh * d.T + i];
          float* row = p.data() + r * keys;
          for (std::int64_t j = 0; j < keys; ++j)
            row[j] = (!opt.causal || j <= i) && (!mrow || mrow[j] != 0) && std::isfinite(l) ? std::exp(row[j] - l) : 0.0f;
          // D_i = dO_i . O_i, the row's sum(dP * P) (FlashAttention-2's backward)
          float dot = 0.0f;
          for (std::int64_t c = 0; c < d.hd; ++c) dot += g[i * d.C + c] * o[i * d.C + c];
          rowdot[std::size_t(r)] = dot;
        }
        // dV += P^T dO_blk
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(keys), int(d.hd), int(rows), 1.0f, p.data(), int(keys),
                    gb, int(d.C), 1.0f, dv, ld);
        // dP = dO_blk V^T, then dS = P * (dP - D) in place
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(keys), int(d.hd), 1.0f, gb, int(d.C), v, ld,
                    0.0f, dp.data(), int(keys));
        for (std::int64_t r = 0; r < rows; ++r)
          for (std::int64_t j = 0; j < keys; ++j)
            dp[std::size_t(r * keys + j)] = p[std::size_t(r * keys + j)] * (dp[std::size_t(r * keys + j)] - rowdot[std::size_t(r)]);
        // dQ_blk = scale * dS K ; dK += scale * dS^T Q_blk
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(d.hd), int(keys), scale, dp.data(),
                    int(keys), k, ld, 0.0f, dq + i0 * ld, ld);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(keys), int(d.hd), int(rows), scale, dp.data(), int(keys),
                    qb, ld, 1.0f, dk, ld);
      }
    }
  }
}

}  // namespace tidal::ops::cpu
