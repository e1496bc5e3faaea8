// CPU ring-attention blocks, flash-style: a task takes one (sample, head) pair in forward and one
// (sample, kv head) pair in backward, and walks this rank's queries kRows at a time against the
// block's keys, so only a kRows x Tk tile of scores (and of dP in backward) is ever held, per
// thread. Each tile's products are single-threaded OpenBLAS GEMMs reading q, y, dy (leading
// dimension C) and the block's keys and values (leading dimension 2 Ckv) in place. Backward's
// task visits the kv head's query heads in query_head_of order and is the only writer of their
// dq rows and of the kv head's dkv columns: the same sums in the same order on every run.
#include "ops/ring_attention.h"

#include "ops/cpu/typed.h"
#include "ops/cpu/vec_math.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace tidal::ops::cpu {
namespace {

using Dims = RingAttentionDims;

constexpr std::int64_t kRows = 64;  // queries per tile
constexpr float kInf = std::numeric_limits<float>::infinity();

Dims check(const Tensor& local, const Tensor& rows, const RingAttentionOptions& opt) {
  expect_cpu_contiguous({&local, &rows}, "ring attention");
  if (opt.key_mask) expect_cpu_contiguous(*opt.key_mask, "ring attention key_mask");
  return ring_attention_dims(local, rows, opt);
}

std::int64_t check_block(const Dims& d, const Tensor& block, std::int64_t first_key, const RingAttentionOptions& opt) {
  expect_cpu_contiguous(block, "ring attention block");
  return ring_attention_block(d, block, first_key, opt);
}

// Whether key j of the block is a real token of sample b (no mask: all are).
bool real_key(const RingAttentionOptions& opt, std::int64_t b, std::int64_t key) {
  return opt.key_mask == nullptr ||
         opt.key_mask->data<std::int32_t>()[b * opt.key_mask->dim(1) + key] != 0;
}

// row[j] = e^(row[j] - m) for j < n; returns their sum.
float exp_row(float* row, std::int64_t n, float m) {
  float total = 0.0f;
  for (std::int64_t j = 0; j < n; ++j) {
    const float e = exp_fast(row[j] - m);
    row[j] = e;
    total += e;
  }
  return total;
}

}  // namespace

void ring_attention_forward(Tensor& y, Tensor& lse, Tensor& sum, const Tensor& q, const Tensor& kv,
                            std::int64_t first_key, const RingAttentionOptions& opt) {
  const Dims d = check(q, lse, opt);
  expect_cpu_contiguous({&y, &sum}, "ring attention");
  expect_same(y, q, "ring attention y/q");
  expect_same(sum, lse, "ring attention sum/lse");
  const std::int64_t Tk = check_block(d, kv, first_key, opt), W = d.block_width();
  if (visible_keys(opt.causal, opt.first_query, first_key, Tk, d.Tq - 1) == 0) return;  // every key after every query
  const float *pq = q.data<float>(), *pkv = kv.data<float>();
  float *py = y.data<float>(), *pm = lse.data<float>(), *pl = sum.data<float>();
#pragma omp parallel for schedule(dynamic)
  for (std::int64_t bh = 0; bh < d.B * d.H; ++bh) {
    const std::int64_t b = bh / d.H, h = bh % d.H;
    const float* k = pkv + b * Tk * W + d.key_offset(h);
    const float* v = pkv + b * Tk * W + d.value_offset(h);
    std::vector<float> scores(std::size_t(std::min(kRows, d.Tq) * Tk));
    for (std::int64_t i0 = 0; i0 < d.Tq; i0 += kRows) {
      const std::int64_t rows = std::min(kRows, d.Tq - i0), nk = visible_keys(opt.causal, opt.first_query, first_key, Tk, i0 + rows - 1);
      if (nk == 0) continue;
      float* s = scores.data();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(nk), int(d.hd), d.scale,
                  pq + (b * d.Tq + i0) * d.C + d.query_offset(h), int(d.C), k, int(W), 0.0f, s, int(nk));
      for (std::int64_t r = 0; r < rows; ++r) {
        float* row = s + r * nk;
        const std::int64_t i = i0 + r, n = visible_keys(opt.causal, opt.first_query, first_key, Tk, i);
        float best = -kInf;
        for (std::int64_t j = 0; j < nk; ++j) {
          if (j >= n || !real_key(opt, b, first_key + j)) row[j] = -kInf;
          best = std::max(best, row[j]);
        }
        if (best == -kInf) {  // nothing to attend in this block: the row's state stays
          std::fill(row, row + nk, 0.0f);
          continue;
        }
        float& m = pm[bh * d.Tq + i];
        const float m_new = std::max(m, best), alpha = exp_fast(m - m_new);
        pl[bh * d.Tq + i] = pl[bh * d.Tq + i] * alpha + exp_row(row, nk, m_new);
        m = m_new;
        float* out = py + (b * d.Tq + i) * d.C + d.output_offset(h);
        for (std::int64_t c = 0; c < d.hd; ++c) out[c] *= alpha;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(d.hd), int(nk), 1.0f, s, int(nk), v, int(W),
                  1.0f, py + (b * d.Tq + i0) * d.C + d.output_offset(h), int(d.C));
    }
  }
}

void ring_attention_finish(Tensor& y, Tensor& lse, const Tensor& sum, const RingAttentionOptions& opt) {
  const Dims d = check(y, lse, opt);
  expect_cpu_contiguous(sum, "ring attention sum");
  expect_same(sum, lse, "ring attention sum/lse");
  float *py = y.data<float>(), *pm = lse.data<float>();
  const float* pl = sum.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t bh = 0; bh < d.B * d.H; ++bh) {
    const std::int64_t b = bh / d.H, h = bh % d.H;
    for (std::int64_t i = 0; i < d.Tq; ++i) {
      const float l = pl[bh * d.Tq + i];
      float* out = py + (b * d.Tq + i) * d.C + d.output_offset(h);
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      for (std::int64_t c = 0; c < d.hd; ++c) out[c] *= inv;
      pm[bh * d.Tq + i] = l > 0.0f ? pm[bh * d.Tq + i] + std::log(l) : kInf;
    }
  }
}

void ring_attention_backward(Tensor& dq, Tensor& dkv, const Tensor& q, const Tensor& kv, const Tensor& y,
                             const Tensor& dy, const Tensor& lse, std::int64_t first_key,
                             const RingAttentionOptions& opt) {
  const Dims d = check(q, lse, opt);
  expect_cpu_contiguous({&dq, &dkv, &y, &dy}, "ring attention backward");
  for (const Tensor* t : std::initializer_list<const Tensor*>{&dq, &y, &dy}) expect_same(*t, q, "ring attention backward");
  expect_same(dkv, kv, "ring attention dkv/kv");
  const std::int64_t Tk = check_block(d, kv, first_key, opt), W = d.block_width();
  if (visible_keys(opt.causal, opt.first_query, first_key, Tk, d.Tq - 1) == 0) return;
  const float *pq = q.data<float>(), *pkv = kv.data<float>(), *py = y.data<float>(), *pdy = dy.data<float>(),
              *plse = lse.data<float>();
  float *pdq = dq.data<float>(), *pdkv = dkv.data<float>();
#pragma omp parallel for schedule(dynamic)
  for (std::int64_t bg = 0; bg < d.B * d.Hkv; ++bg) {
    const std::int64_t b = bg / d.Hkv, g = bg % d.Hkv;
    std::vector<float> probs(std::size_t(std::min(kRows, d.Tq) * Tk)), dprobs(probs.size());
    for (std::int64_t i = 0; i < d.group(); ++i) {
      const std::int64_t h = query_head_of(g, i, d.Hkv);
      const float* k = pkv + b * Tk * W + d.key_offset(h);
      const float* v = pkv + b * Tk * W + d.value_offset(h);
      float* dk = pdkv + b * Tk * W + d.key_offset(h);
      float* dv = pdkv + b * Tk * W + d.value_offset(h);
      for (std::int64_t i0 = 0; i0 < d.Tq; i0 += kRows) {
        const std::int64_t rows = std::min(kRows, d.Tq - i0), nk = visible_keys(opt.causal, opt.first_query, first_key, Tk, i0 + rows - 1);
        if (nk == 0) continue;
        const float* qt = pq + (b * d.Tq + i0) * d.C + d.query_offset(h);
        const float* gt = pdy + (b * d.Tq + i0) * d.C + d.output_offset(h);
        float *p = probs.data(), *dp = dprobs.data();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(nk), int(d.hd), d.scale, qt, int(d.C), k,
                    int(W), 0.0f, p, int(nk));
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(nk), int(d.hd), 1.0f, gt, int(d.C), v,
                    int(W), 0.0f, dp, int(nk));
        for (std::int64_t r = 0; r < rows; ++r) {
          const std::int64_t row = i0 + r, n = visible_keys(opt.causal, opt.first_query, first_key, Tk, row);
          const float l = plse[(b * d.H + h) * d.Tq + row];
          const float* o = py + (b * d.Tq + row) * d.C + d.output_offset(h);
          const float* go = gt + r * d.C;
          float delta = 0.0f;  // rowsum(dY * Y) of this head
          for (std::int64_t c = 0; c < d.hd; ++c) delta += go[c] * o[c];
          float *pr = p + r * nk, *dpr = dp + r * nk;
          for (std::int64_t j = 0; j < nk; ++j) {
            const float pj = j < n && real_key(opt, b, first_key + j) ? exp_fast(pr[j] - l) : 0.0f;
            pr[j] = pj;
            dpr[j] = pj * (dpr[j] - delta);  // dS
          }
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(d.hd), int(nk), d.scale, dp, int(nk), k,
                    int(W), 1.0f, pdq + (b * d.Tq + i0) * d.C + d.query_offset(h), int(d.C));
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(nk), int(d.hd), int(rows), d.scale, dp, int(nk), qt,
                    int(d.C), 1.0f, dk, int(W));
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(nk), int(d.hd), int(rows), 1.0f, p, int(nk), gt,
                    int(d.C), 1.0f, dv, int(W));
      }
    }
  }
}

}  // namespace tidal::ops::cpu
