// CPU ring-attention blocks, flash-style: a task takes one (sample, head) pair in forward and one
// (sample, kv head) pair in backward, and walks this rank's queries kRows at a time against the
// block's keys, so only a kRows x Tk tile of scores (and of dP in backward) is ever held, per
// thread. Each tile's products are single-threaded GEMMs (ops/cpu/sgemm.h) reading q, y, dy and
// the block's keys and values in place, their row strides the leading dimensions. Backward's
// task visits the kv head's query heads in query_head_of order and is the only writer of their
// dq rows and of the kv head's dkv columns: the same sums in the same order on every run.
#include "ops/ring_attention.h"

#include "ops/cpu/sgemm.h"
#include "ops/cpu/vec_math.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace tidal::ops::cpu {
namespace {

using Dims = RingAttentionDims;

constexpr std::int64_t kRows = 64;  // queries per tile
constexpr float kInf = std::numeric_limits<float>::infinity();

// The documents of sample b over the whole sequence (Documents{}: one).
Documents documents(const RingAttentionOptions& opt, std::int64_t b) {
  const Tensor* docs = opt.doc_positions;
  return docs ? Documents{docs->data<std::int32_t>() + b * docs->dim(1), docs->dim(1)} : Documents{};
}

// The keys of the block that queries [i0, i1) of sample b may attend (ops/ring_attention.h).
KeySpan tile_keys(const RingAttentionOptions& opt, const Documents& docs, std::int64_t first_key, std::int64_t Tk,
                  std::int64_t i0, std::int64_t i1) {
  return {visible_keys(opt.causal, docs, opt.first_query, first_key, Tk, i0).lo,
          visible_keys(opt.causal, docs, opt.first_query, first_key, Tk, i1 - 1).hi};
}

// Whether any query of sample b attends any key of the block.
bool any_visible(const RingAttentionOptions& opt, std::int64_t B, std::int64_t Tq, std::int64_t first_key,
                 std::int64_t Tk) {
  for (std::int64_t b = 0; b < B; ++b)
    if (!tile_keys(opt, documents(opt, b), first_key, Tk, 0, Tq).empty()) return true;
  return false;
}

// Whether key j of the block is a real token of sample b (no mask: all are).
bool real_key(const RingAttentionOptions& opt, std::int64_t b, std::int64_t key) {
  return opt.key_mask == nullptr ||
         opt.key_mask->data<std::int32_t>()[b * opt.key_mask->dim(1) + key] != 0;
}

// row[j] = e^(row[j] - m) for j < n; returns their sum.
float exp_row(float* row, std::int64_t n, float m) {
  float total = 0.0f;
#pragma omp simd reduction(+ : total)
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
  const Dims d = check_ring_forward(y, lse, sum, q, kv, first_key, opt, Device::Kind::cpu);
  const std::int64_t Tk = kv.dim(1);
  if (d.Tq == 0 || !any_visible(opt, d.B, d.Tq, first_key, Tk)) return;  // after every query, or in other documents
  const RowsView<const float> vq = rows_view<const float>(q), vkv = rows_view<const float>(kv);
  const RowsView<float> vy = rows_view<float>(y), vm = rows_view<float>(lse), vl = rows_view<float>(sum);
#pragma omp parallel for schedule(dynamic)
  for (std::int64_t bh = 0; bh < d.B * d.H; ++bh) {
    const std::int64_t b = bh / d.H, h = bh % d.H;
    const Documents docs = documents(opt, b);
    float *m = vm.at(b, h), *l = vl.at(b, h);  // this head's row of statistics
    std::vector<float> scores(std::size_t(std::min(kRows, d.Tq) * Tk));
    for (std::int64_t i0 = 0; i0 < d.Tq; i0 += kRows) {
      const std::int64_t rows = std::min(kRows, d.Tq - i0);
      const KeySpan keys = tile_keys(opt, docs, first_key, Tk, i0, i0 + rows);
      if (keys.empty()) continue;
      const std::int64_t nk = keys.hi - keys.lo;
      const float* k = vkv.at(b, keys.lo) + d.key_offset(h);
      const float* v = vkv.at(b, keys.lo) + d.value_offset(h);
      float* s = scores.data();
      sgemm(false, true, rows, nk, d.hd, d.scale, vq.at(b, i0) + d.query_offset(h), vq.row, k, vkv.row, 0.0f, s, nk);
      for (std::int64_t r = 0; r < rows; ++r) {
        float* row = s + r * nk;
        const std::int64_t i = i0 + r;
        const KeySpan mine = visible_keys(opt.causal, docs, opt.first_query, first_key, Tk, i);
        float best = -kInf;
        for (std::int64_t j = 0; j < nk; ++j) {
          const std::int64_t key = keys.lo + j;
          if (key < mine.lo || key >= mine.hi || !real_key(opt, b, first_key + key)) row[j] = -kInf;
          best = std::max(best, row[j]);
        }
        if (best == -kInf) {  // nothing to attend in this block: the row's state stays
          std::fill(row, row + nk, 0.0f);
          continue;
        }
        const float m_new = std::max(m[i], best), alpha = exp_fast(m[i] - m_new);
        l[i] = l[i] * alpha + exp_row(row, nk, m_new);
        m[i] = m_new;
        float* out = vy.at(b, i) + d.output_offset(h);
        for (std::int64_t c = 0; c < d.hd; ++c) out[c] *= alpha;
      }
      sgemm(false, false, rows, d.hd, nk, 1.0f, s, nk, v, vkv.row, 1.0f, vy.at(b, i0) + d.output_offset(h), vy.row);
    }
  }
}

double ring_work_share(bool causal, std::int64_t first_query, std::int64_t first_key, std::int64_t Tq, std::int64_t Tk) {
  const RingAttentionOptions opt{.causal = causal, .first_query = first_query};
  double computed = 0;  // each tile's rows against its keys, as the kernels above take them
  for (std::int64_t i0 = 0; i0 < Tq; i0 += kRows) {
    const std::int64_t rows = std::min(kRows, Tq - i0);
    const KeySpan keys = tile_keys(opt, Documents{}, first_key, Tk, i0, i0 + rows);
    if (!keys.empty()) computed += double(rows) * double(keys.hi - keys.lo);
  }
  return Tq > 0 && Tk > 0 ? computed / (double(Tq) * double(Tk)) : 0.0;
}

void ring_attention_finish(Tensor& y, Tensor& lse, const Tensor& sum, const RingAttentionOptions& opt) {
  const Dims d = check_ring_finish(y, lse, sum, opt, Device::Kind::cpu);
  const RowsView<float> vy = rows_view<float>(y), vm = rows_view<float>(lse);
  const RowsView<const float> vl = rows_view<const float>(sum);
#pragma omp parallel for schedule(static)
  for (std::int64_t bh = 0; bh < d.B * d.H; ++bh) {
    const std::int64_t b = bh / d.H, h = bh % d.H;
    float* m = vm.at(b, h);
    const float* l = vl.at(b, h);
    for (std::int64_t i = 0; i < d.Tq; ++i) {
      float* out = vy.at(b, i) + d.output_offset(h);
      const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
      for (std::int64_t c = 0; c < d.hd; ++c) out[c] *= inv;
      m[i] = l[i] > 0.0f ? m[i] + std::log(l[i]) : kInf;
    }
  }
}

void ring_attention_backward(Tensor& dq, Tensor& dkv, const Tensor& q, const Tensor& kv, const Tensor& y,
                             const Tensor& dy, const Tensor& lse, std::int64_t first_key,
                             const RingAttentionOptions& opt) {
  const Dims d = check_ring_backward(dq, dkv, q, kv, y, dy, lse, first_key, opt, Device::Kind::cpu);
  const std::int64_t Tk = kv.dim(1);
  if (d.Tq == 0 || !any_visible(opt, d.B, d.Tq, first_key, Tk)) return;
  const RowsView<const float> vq = rows_view<const float>(q), vkv = rows_view<const float>(kv),
                              vy = rows_view<const float>(y), vdy = rows_view<const float>(dy),
                              vlse = rows_view<const float>(lse);
  const RowsView<float> vdq = rows_view<float>(dq), vdkv = rows_view<float>(dkv);
#pragma omp parallel for schedule(dynamic)
  for (std::int64_t bg = 0; bg < d.B * d.Hkv; ++bg) {
    const std::int64_t b = bg / d.Hkv, g = bg % d.Hkv;
    const Documents docs = documents(opt, b);
    std::vector<float> probs(std::size_t(std::min(kRows, d.Tq) * Tk)), dprobs(probs.size());
    for (std::int64_t t = 0; t < d.group(); ++t) {
      const std::int64_t h = query_head_of(g, t, d.Hkv);
      const float* l = vlse.at(b, h);
      for (std::int64_t i0 = 0; i0 < d.Tq; i0 += kRows) {
        const std::int64_t rows = std::min(kRows, d.Tq - i0);
        const KeySpan keys = tile_keys(opt, docs, first_key, Tk, i0, i0 + rows);
        if (keys.empty()) continue;
        const std::int64_t nk = keys.hi - keys.lo;
        const float* k = vkv.at(b, keys.lo) + d.key_offset(h);
        const float* v = vkv.at(b, keys.lo) + d.value_offset(h);
        float* dk = vdkv.at(b, keys.lo) + d.key_offset(h);
        float* dv = vdkv.at(b, keys.lo) + d.value_offset(h);
        const float* qt = vq.at(b, i0) + d.query_offset(h);
        const float* gt = vdy.at(b, i0) + d.output_offset(h);
        float *p = probs.data(), *dp = dprobs.data();
        sgemm(false, true, rows, nk, d.hd, d.scale, qt, vq.row, k, vkv.row, 0.0f, p, nk);
        sgemm(false, true, rows, nk, d.hd, 1.0f, gt, vdy.row, v, vkv.row, 0.0f, dp, nk);
        for (std::int64_t r = 0; r < rows; ++r) {
          const std::int64_t row = i0 + r;
          const KeySpan mine = visible_keys(opt.causal, docs, opt.first_query, first_key, Tk, row);
          const float* o = vy.at(b, row) + d.output_offset(h);
          const float* go = gt + r * vdy.row;
          float delta = 0.0f;  // rowsum(dY * Y) of this head
          for (std::int64_t c = 0; c < d.hd; ++c) delta += go[c] * o[c];
          float *pr = p + r * nk, *dpr = dp + r * nk;
          for (std::int64_t j = 0; j < nk; ++j) {
            const std::int64_t key = keys.lo + j;
            const bool seen = key >= mine.lo && key < mine.hi && real_key(opt, b, first_key + key);
            const float pj = seen ? exp_fast(pr[j] - l[row]) : 0.0f;
            pr[j] = pj;
            dpr[j] = pj * (dpr[j] - delta);  // dS
          }
        }
        sgemm(false, false, rows, d.hd, nk, d.scale, dp, nk, k, vkv.row, 1.0f, vdq.at(b, i0) + d.query_offset(h),
              vdq.row);
        sgemm(true, false, nk, d.hd, rows, d.scale, dp, nk, qt, vq.row, 1.0f, dk, vdkv.row);
        sgemm(true, false, nk, d.hd, rows, 1.0f, p, nk, gt, vdy.row, 1.0f, dv, vdkv.row);
      }
    }
  }
}

}  // namespace tidal::ops::cpu
