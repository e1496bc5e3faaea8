// CPU ring-attention blocks: one (sample, head) pair per task, each a single-threaded OpenBLAS
// GEMM on a block of the probabilities (leading dimension T, the whole sequence) and one head's
// columns of q, y (leading dimension C), k or v (leading dimension Ckv). The key and value
// gradients take one (sample, kv head) pair per task, so a kv head's sum over its query heads
// has one writer. Nothing is transposed or copied.
#include "ops/ring_attention.h"

#include "ops/cpu/softmax_row.h"
#include "ops/cpu/typed.h"

#include <cblas.h>

#include <cstring>

namespace tidal::ops::cpu {
namespace {

using Dims = RingAttentionDims;

// Checks probs [B, H, Tq, T] against this rank's queries `local` [B, Tq, C].
Dims check(const Tensor& probs, const Tensor& local, const RingAttentionOptions& opt) {
  expect_cpu_contiguous({&probs, &local}, "ring attention");
  if (opt.key_mask) expect_cpu_contiguous(*opt.key_mask, "ring attention key_mask");
  return ring_attention_dims(probs, local, opt);
}

// Checks a key / value block [B, Tk, Ckv] at first_key; returns Tk.
std::int64_t check_block(const Dims& d, const Tensor& block, std::int64_t first_key) {
  expect_cpu_contiguous(block, "ring attention block");
  return ring_attention_block(d, block, first_key);
}

// fn(b, h, probs row-block of (b, h) at column first_key), one task per (sample, query head).
template <class Float, class Fn>
void for_each_head(const Dims& d, Float* probs, std::int64_t first_key, Fn&& fn) {
#pragma omp parallel for schedule(dynamic)
  for (std::int64_t bh = 0; bh < d.B * d.H; ++bh) fn(bh / d.H, bh % d.H, probs + bh * d.Tq * d.T + first_key);
}

// As for_each_head, one task per (sample, kv head) that visits the kv head's query heads in
// order (query_head_of): what accumulates into a key / value block's head is summed by one
// thread.
template <class Float, class Fn>
void for_each_kv_head(const Dims& d, Float* probs, std::int64_t first_key, Fn&& fn) {
#pragma omp parallel for schedule(dynamic)
  for (std::int64_t bg = 0; bg < d.B * d.Hkv; ++bg) {
    const std::int64_t b = bg / d.Hkv, g = bg % d.Hkv;
    for (std::int64_t i = 0; i < d.group(); ++i) {
      const std::int64_t h = query_head_of(g, i, d.Hkv);
      fn(b, h, probs + (b * d.H + h) * d.Tq * d.T + first_key);
    }
  }
}

}  // namespace

void attention_scores(Tensor& probs, const Tensor& q, const Tensor& k, std::int64_t first_key,
                      const RingAttentionOptions& opt) {
  const Dims d = check(probs, q, opt);
  const std::int64_t Tk = check_block(d, k, first_key);
  if (after_all_queries(opt, d, first_key)) return;  // never read: the softmax masks it
  const float *pq = q.data<float>(), *pk = k.data<float>();
  const std::int64_t Ckv = d.kv_width();
  for_each_head(d, probs.data<float>(), first_key, [&](std::int64_t b, std::int64_t h, float* p) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(d.Tq), int(Tk), int(d.hd), d.scale,
                pq + b * d.Tq * d.C + d.query_offset(h), int(d.C), pk + b * Tk * Ckv + d.kv_offset(h), int(Ckv), 0.0f,
                p, int(d.T));
  });
}

void attention_softmax(Tensor& probs, const RingAttentionOptions& opt) {
  expect_cpu_contiguous(probs, "ring attention probs");
  const std::int64_t B = probs.dim(0), H = probs.dim(1), Tq = probs.dim(2), T = probs.dim(3);
  const std::int32_t* mask = opt.key_mask ? opt.key_mask->data<std::int32_t>() : nullptr;
  float* pp = probs.data<float>();
#pragma omp parallel for schedule(dynamic)
  for (std::int64_t bh = 0; bh < B * H; ++bh) {
    const std::int32_t* mrow = mask ? mask + (bh / H) * T : nullptr;
    for (std::int64_t i = 0; i < Tq; ++i) {
      const std::int64_t query = opt.first_query + i;
      float* row = pp + (bh * Tq + i) * T;
      softmax_row(row, row, T, opt.causal ? query + 1 : T, mrow);
    }
  }
}

void attention_values(Tensor& y, const Tensor& probs, const Tensor& v, std::int64_t first_key,
                      const RingAttentionOptions& opt) {
  const Dims d = check(probs, y, opt);
  const std::int64_t Tk = check_block(d, v, first_key);
  if (after_all_queries(opt, d, first_key)) return;
  const float* pv = v.data<float>();
  float* py = y.data<float>();
  const std::int64_t Ckv = d.kv_width();
  for_each_head(d, probs.data<float>(), first_key, [&](std::int64_t b, std::int64_t h, const float* p) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(d.Tq), int(d.hd), int(Tk), 1.0f, p, int(d.T),
                pv + b * Tk * Ckv + d.kv_offset(h), int(Ckv), 1.0f, py + b * d.Tq * d.C + d.output_offset(h), int(d.C));
  });
}

void attention_probs_grad(Tensor& dprobs, const Tensor& dy, const Tensor& v, std::int64_t first_key,
                          const RingAttentionOptions& opt) {
  const Dims d = check(dprobs, dy, opt);
  const std::int64_t Tk = check_block(d, v, first_key);
  const bool skip = after_all_queries(opt, d, first_key);
  const float *pdy = dy.data<float>(), *pv = v.data<float>();
  const std::int64_t Ckv = d.kv_width();
  for_each_head(d, dprobs.data<float>(), first_key, [&](std::int64_t b, std::int64_t h, float* dp) {
    if (skip) {  // zero, not left as is: the softmax backward multiplies it by P = 0
      for (std::int64_t i = 0; i < d.Tq; ++i) std::memset(dp + i * d.T, 0, std::size_t(Tk) * sizeof(float));
      return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(d.Tq), int(Tk), int(d.hd), 1.0f,
                pdy + b * d.Tq * d.C + d.output_offset(h), int(d.C), pv + b * Tk * Ckv + d.kv_offset(h), int(Ckv), 0.0f,
                dp, int(d.T));
  });
}

void attention_values_grad(Tensor& dv, const Tensor& probs, const Tensor& dy, std::int64_t first_key,
                           const RingAttentionOptions& opt) {
  const Dims d = check(probs, dy, opt);
  const std::int64_t Tk = check_block(d, dv, first_key);
  if (after_all_queries(opt, d, first_key)) return;
  const float* pdy = dy.data<float>();
  float* pdv = dv.data<float>();
  const std::int64_t Ckv = d.kv_width();
  for_each_kv_head(d, probs.data<float>(), first_key, [&](std::int64_t b, std::int64_t h, const float* p) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(Tk), int(d.hd), int(d.Tq), 1.0f, p, int(d.T),
                pdy + b * d.Tq * d.C + d.output_offset(h), int(d.C), 1.0f, pdv + b * Tk * Ckv + d.kv_offset(h),
                int(Ckv));
  });
}

void attention_softmax_backward(Tensor& dprobs, const Tensor& probs) {
  expect_cpu_contiguous({&dprobs, &probs}, "ring attention softmax backward");
  expect_same(dprobs, probs, "ring attention dprobs/probs");
  const std::int64_t T = probs.dim(-1), rows = probs.numel() / T;
  float* pd = dprobs.data<float>();
  const float* pp = probs.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) softmax_row_backward(pd + r * T, pd + r * T, pp + r * T, T);
}

void attention_query_grad(Tensor& dq, const Tensor& dscores, const Tensor& k, std::int64_t first_key,
                          const RingAttentionOptions& opt) {
  const Dims d = check(dscores, dq, opt);
  const std::int64_t Tk = check_block(d, k, first_key);
  if (after_all_queries(opt, d, first_key)) return;
  const float* pk = k.data<float>();
  float* pdq = dq.data<float>();
  const std::int64_t Ckv = d.kv_width();
  for_each_head(d, dscores.data<float>(), first_key, [&](std::int64_t b, std::int64_t h, const float* ds) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(d.Tq), int(d.hd), int(Tk), d.scale, ds, int(d.T),
                pk + b * Tk * Ckv + d.kv_offset(h), int(Ckv), 1.0f, pdq + b * d.Tq * d.C + d.query_offset(h), int(d.C));
  });
}

void attention_key_grad(Tensor& dk, const Tensor& dscores, const Tensor& q, std::int64_t first_key,
                        const RingAttentionOptions& opt) {
  const Dims d = check(dscores, q, opt);
  const std::int64_t Tk = check_block(d, dk, first_key);
  if (after_all_queries(opt, d, first_key)) return;
  const float* pq = q.data<float>();
  float* pdk = dk.data<float>();
  const std::int64_t Ckv = d.kv_width();
  for_each_kv_head(d, dscores.data<float>(), first_key, [&](std::int64_t b, std::int64_t h, const float* ds) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(Tk), int(d.hd), int(d.Tq), d.scale, ds, int(d.T),
                pq + b * d.Tq * d.C + d.query_offset(h), int(d.C), 1.0f, pdk + b * Tk * Ckv + d.kv_offset(h),
                int(Ckv));
  });
}

}  // namespace tidal::ops::cpu
