// CPU attention, flash-style (FlashAttention-2's schedule on the CPU): a task takes a block of
// queries of one (batch, head) pair against every key it may attend, so the scores of only
// kQueryBlock rows are ever held (per thread), never the [T, T] matrix. Each block's products
// run on the calling thread (block_product: ops/cpu/sgemm.h's libraries and oneDNN's bf16 all
// run serially inside a parallel region), reading Q, K and V in place from qkv with leading
// dimension (H + 2 Hkv) hd. Under the causal mask a block stops at its last query's key, which halves the
// work; with packed documents (AttentionOptions::doc_positions) it also starts at its first
// query's document, so a sequence of n documents costs about 1/n of one document as long.
//
// Grouped-query heads (GQA, Ainslie et al. 2023): forward reads each query head's kv head in
// place. Backward's task is a (batch, kv head) pair, which walks the query heads that share the
// kv head in ascending order and sums their dK and dV into one fp32 buffer before a single store:
// the same sum in the same order on every run, with no atomics and no copy of K and V per query
// head.
//
// Storage type T: fp32, or bf16 where the CPU multiplies bf16 natively (onednn_bf16_native).
// Scores, softmax and the dK / dV sums are fp32; in bf16 the probabilities P and dS are rounded
// to bf16 before they multiply V, dO, K and Q (FlashAttention-2's and PyTorch's bf16 kernels do
// the same). Elsewhere bf16 / fp16 inputs are widened to fp32 copies and the results rounded back.
#include "ops/attention.h"

#include "ops/cast.h"

#include "ops/cpu/onednn_matmul.h"
#include "ops/cpu/sgemm.h"
#include "ops/cpu/softmax_row.h"
#include "ops/cpu/typed.h"
#include "ops/cpu/vec_math.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
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
  if (opt.doc_positions) expect_cpu_contiguous(*opt.doc_positions, "attention doc_positions");
  return attention_dims(qkv, lse, opt);
}

Tensor widened(const Tensor& t) {
  if (t.dtype() == DType::f32) return t;
  Tensor w = Tensor::empty(t.shape());
  cast(w, t);
  return w;
}

// Whether the kernels run on qkv's storage type as it is (else it is widened to fp32 first).
bool runs_natively(DType t) { return t == DType::f32 || (t == DType::bf16 && onednn_bf16_native()); }

// Keys [lo, hi) of a sample.
struct KeyRange {
  std::int64_t lo, hi;
  std::int64_t n() const { return hi - lo; }
};

// The documents of sample b.
Documents documents(const AttentionOptions& opt, const Dims& d, std::int64_t b) {
  return {opt.doc_positions ? opt.doc_positions->data<std::int32_t>() + b * d.T : nullptr, d.T};
}

// The keys query i attends (before the key mask): its document's, up to itself when causal.
KeyRange row_keys(const AttentionOptions& opt, const Documents& docs, std::int64_t i) {
  return {docs.start(i), opt.causal ? i + 1 : docs.end(i)};
}

// The keys a block of queries [i0, i1) may attend: from its first query's document to its last
// query's keys (the documents are runs, ops/attention.h).
KeyRange keys_for(const AttentionOptions& opt, const Documents& docs, std::int64_t i0, std::int64_t i1) {
  return {docs.start(i0), row_keys(opt, docs, i1 - 1).hi};
}

// A matrix operand in storage type T: rows of `ld` elements, transposed when `trans`.
template <class T>
MatmulOperand operand(const T* p, std::int64_t ld, bool trans = false) {
  return {p, dtype_of<T>(), ld, trans};
}

// c [m, n] = alpha * op(a) op(b) + beta * c on this thread: fp32 on sgemm's library; bf16 on MKL's
// bf16 GEMM where MKL runs the products (a bf16 c through `rounding`, its fp32 rows rounded once)
// or on oneDNN (bf16 reaches the kernels only where the CPU multiplies it).
template <class C>
void block_product(C* c, std::int64_t ldc, const MatmulOperand& a, const MatmulOperand& b, std::int64_t m,
                   std::int64_t n, std::int64_t k, float alpha, float beta, std::vector<float>& rounding) {
  if (a.dtype == DType::f32 && b.dtype == DType::f32) {
    if constexpr (std::is_same_v<C, float>) {
      sgemm(a.trans, b.trans, m, n, k, alpha, static_cast<const float*>(a.data), a.ld, static_cast<const float*>(b.data),
            b.ld, beta, c, ldc);
      return;
    }
  } else if (a.dtype == DType::bf16 && b.dtype == DType::bf16) {
    const auto* pa = static_cast<const bf16*>(a.data);
    const auto* pb = static_cast<const bf16*>(b.data);
    if constexpr (std::is_same_v<C, float>) {
      if (sgemm_bf16(a.trans, b.trans, m, n, k, alpha, pa, a.ld, pb, b.ld, beta, c, ldc)) return;
    } else {
      TIDAL_ASSERT(beta == 0.0f, "a bf16 block product into bf16 adds nothing to c");
      if (rounding.size() < std::size_t(m * n)) rounding.resize(std::size_t(m * n));
      if (sgemm_bf16(a.trans, b.trans, m, n, k, alpha, pa, a.ld, pb, b.ld, 0.0f, rounding.data(), n)) {
        for (std::int64_t i = 0; i < m; ++i) {
          const float* row = rounding.data() + i * n;
          C* out = c + i * ldc;
#pragma omp simd
          for (std::int64_t j = 0; j < n; ++j) out[j] = from_float<C>(row[j]);
        }
        return;
      }
    }
  }
  const bool ran = onednn_matmul(c, dtype_of<C>(), ldc, a, b, m, n, k, alpha, beta);
  TIDAL_ASSERT(ran, "attention product in {} without oneDNN", dtype_name(a.dtype));
}

// fp32 rows into storage type T (a copy only for bf16; fp32 kernels read the fp32 rows).
template <class T>
const T* in_storage(const float* x, std::vector<T>& buf, std::int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    if (buf.size() < std::size_t(n)) buf.resize(std::size_t(n));
#pragma omp simd
    for (std::int64_t i = 0; i < n; ++i) buf[std::size_t(i)] = from_float<T>(x[i]);
    return buf.data();
  }
}

template <class T>
void forward_kernel(Tensor& y, Tensor& lse, const Tensor& qkv, const AttentionOptions& opt, const Dims& d) {
  const float scale = 1.0f / std::sqrt(float(d.hd));
  const std::int64_t ld = d.qkv_width();
  const T* base = qkv.data<T>();
  T* py = y.data<T>();
  float* pl = lse.data<float>();
  const std::int32_t* mask = opt.key_mask ? opt.key_mask->data<std::int32_t>() : nullptr;
  const std::int64_t blocks = (d.T + kQueryBlock - 1) / kQueryBlock;
#pragma omp parallel
  {
    std::vector<float> scores(std::size_t(std::min(d.T, kQueryBlock) * d.T)), rounding;
    std::vector<T> probs;
#pragma omp for schedule(dynamic)
    for (std::int64_t task = 0; task < d.B * d.H * blocks; ++task) {
      const std::int64_t bh = task / blocks, b = bh / d.H, h = bh % d.H, g = kv_head_of(h, d.Hkv);
      const std::int64_t i0 = task % blocks * kQueryBlock, i1 = std::min(d.T, i0 + kQueryBlock), rows = i1 - i0;
      const Documents docs = documents(opt, d, b);
      const KeyRange kr = keys_for(opt, docs, i0, i1);
      const std::int64_t keys = kr.n();
      const T* sample = base + b * d.T * ld;
      const T* q = sample + i0 * ld + d.query_offset(h);
      const T* k = sample + kr.lo * ld + d.key_offset(g);
      const T* v = sample + kr.lo * ld + d.value_offset(g);
      // S = scale * Q_blk K^T  [rows, keys], then P = softmax(S) in place, remembering each row's lse
      block_product(scores.data(), keys, operand(q, ld), operand(k, ld, true), rows, keys, d.hd, scale, 0.0f, rounding);
      const std::int32_t* mrow = mask ? mask + b * d.T + kr.lo : nullptr;
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t i = i0 + r;
        const KeyRange rk = row_keys(opt, docs, i);
        float* row = scores.data() + r * keys;
        pl[bh * d.T + i] = softmax_row(row, row, keys, rk.lo - kr.lo, rk.hi - kr.lo, mrow);
      }
      // Y_blk = P V  [rows, hd]
      const T* p = in_storage(scores.data(), probs, rows * keys);
      block_product(py + (b * d.T + i0) * d.C + d.output_offset(h), d.C, operand(p, keys), operand(v, ld), rows, d.hd, keys,
                    1.0f, 0.0f, rounding);
    }
  }
}

// One thread's backward scratch: a block's probabilities and score gradients, its rows' D, and
// the dK / dV sums of the kv head it works on.
template <class T>
struct BackwardScratch {
  explicit BackwardScratch(const Dims& d)
      : p(std::size_t(std::min(d.T, kQueryBlock) * d.T)),
        dp(p.size()),
        rowdot(std::size_t(std::min(d.T, kQueryBlock))),
        dk_sum(std::size_t(d.T * d.hd)),
        dv_sum(dk_sum.size()) {}
  std::vector<float> p, dp;           // [rows, keys] fp32
  std::vector<float> rowdot;          // [rows]
  std::vector<float> dk_sum, dv_sum;  // [T, hd] fp32
  std::vector<T> p_store, ds_store;   // p and dS in storage type T, for the products
  std::vector<float> rounding;        // a bf16 product's fp32 rows (block_product)
};

// One query head of one sample: q, k, v and dq are its columns (and its kv head's) of qkv and
// dqkv from the sample's row 0 (leading dim qkv_width), o and g its columns of y and dy (leading
// dim C), lse_row its [T] log-sum-exps, mrow its key mask (or null). Writes its dQ and adds its
// share of dK and dV to the scratch sums, query block by query block in order.
template <class T>
void query_head_backward(T* dq, BackwardScratch<T>& w, const T* q, const T* k_row0, const T* v_row0, const T* o,
                         const T* g, const float* lse_row, const std::int32_t* mrow, const Documents& docs,
                         const AttentionOptions& opt, const Dims& d) {
  const float scale = 1.0f / std::sqrt(float(d.hd));
  const std::int64_t ld = d.qkv_width();
  for (std::int64_t i0 = 0; i0 < d.T; i0 += kQueryBlock) {
    const std::int64_t i1 = std::min(d.T, i0 + kQueryBlock), rows = i1 - i0;
    const KeyRange kr = keys_for(opt, docs, i0, i1);
    const std::int64_t keys = kr.n();
    const T* k = k_row0 + kr.lo * ld;
    const T* v = v_row0 + kr.lo * ld;
    const std::int32_t* mb = mrow ? mrow + kr.lo : nullptr;
    const T* qb = q + i0 * ld;
    const T* gb = g + i0 * d.C;
    // P = exp(scale * Q_blk K^T - lse), recomputed
    block_product(w.p.data(), keys, operand(qb, ld), operand(k, ld, true), rows, keys, d.hd, scale, 0.0f, w.rounding);
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t i = i0 + r;
      const float l = lse_row[i];
      float* row = w.p.data() + r * keys;
      // A row with no kept key (lse +inf) is all zeros; without a key mask the kept keys are a run.
      const KeyRange rk = row_keys(opt, docs, i);
      const std::int64_t first = rk.lo - kr.lo, limit = std::isfinite(l) ? rk.hi - kr.lo : 0;
      const std::int64_t span = kept_span(keys, limit, mb);
      if (mb) {
#pragma omp simd
        for (std::int64_t j = 0; j < span; ++j) row[j] = kept(j, first, limit, mb) ? exp_fast(row[j] - l) : 0.0f;
      } else {
#pragma omp simd
        for (std::int64_t j = 0; j < span; ++j) row[j] = ((j >= first) & (j < limit)) ? exp_fast(row[j] - l) : 0.0f;
      }
      std::fill(row + span, row + keys, 0.0f);
      // D_i = dO_i . O_i, the row's sum(dP * P) (FlashAttention-2's backward)
      const T* grow = g + i * d.C;
      const T* orow = o + i * d.C;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (std::int64_t c = 0; c < d.hd; ++c) dot += to_float(grow[c]) * to_float(orow[c]);
      w.rowdot[std::size_t(r)] = dot;
    }
    const T* ps = in_storage(w.p.data(), w.p_store, rows * keys);
    // dV += P^T dO_blk
    block_product(w.dv_sum.data() + kr.lo * d.hd, d.hd, operand(ps, keys, true), operand(gb, d.C), keys, d.hd, rows,
                  1.0f, 1.0f, w.rounding);
    // dP = dO_blk V^T, then dS = P * (dP - D) in place
    block_product(w.dp.data(), keys, operand(gb, d.C), operand(v, ld, true), rows, keys, d.hd, 1.0f, 0.0f, w.rounding);
    for (std::int64_t r = 0; r < rows; ++r) {
      float* dpr = w.dp.data() + r * keys;
      const float* pr = w.p.data() + r * keys;
      const float dr = w.rowdot[std::size_t(r)];
#pragma omp simd
      for (std::int64_t j = 0; j < keys; ++j) dpr[j] = pr[j] * (dpr[j] - dr);
    }
    const T* ds = in_storage(w.dp.data(), w.ds_store, rows * keys);
    // dQ_blk = scale * dS K ; dK += scale * dS^T Q_blk
    block_product(dq + i0 * ld, ld, operand(ds, keys), operand(k, ld), rows, d.hd, keys, scale, 0.0f, w.rounding);
    block_product(w.dk_sum.data() + kr.lo * d.hd, d.hd, operand(ds, keys, true), operand(qb, ld), keys, d.hd, rows,
                  scale, 1.0f, w.rounding);
  }
}

template <class T>
void backward_kernel(Tensor& dqkv, const Tensor& dy, const Tensor& qkv, const Tensor& y, const Tensor& lse,
                     const AttentionOptions& opt, const Dims& d) {
  const std::int64_t ld = d.qkv_width();
  const T* base = qkv.data<T>();
  T* dbase = dqkv.data<T>();
  const T* pdy = dy.data<T>();
  const T* py = y.data<T>();
  const float* pl = lse.data<float>();
  const std::int32_t* mask = opt.key_mask ? opt.key_mask->data<std::int32_t>() : nullptr;
  // A task is a (batch, kv head) pair: dK and dV sum over its query heads, and inside each over
  // the query blocks, in order (deterministic).
#pragma omp parallel
  {
    BackwardScratch<T> w(d);
#pragma omp for schedule(dynamic)
    for (std::int64_t bg = 0; bg < d.B * d.Hkv; ++bg) {
      const std::int64_t b = bg / d.Hkv, kv = bg % d.Hkv;
      const T* sample = base + b * d.T * ld;
      T* dsample = dbase + b * d.T * ld;
      const std::int32_t* mrow = mask ? mask + b * d.T : nullptr;
      const Documents docs = documents(opt, d, b);
      std::fill(w.dk_sum.begin(), w.dk_sum.end(), 0.0f);
      std::fill(w.dv_sum.begin(), w.dv_sum.end(), 0.0f);
      for (std::int64_t i = 0; i < d.H / d.Hkv; ++i) {
        const std::int64_t h = query_head_of(kv, i, d.Hkv);
        const std::int64_t out = b * d.T * d.C + d.output_offset(h);  // O and dO [T, hd], leading dim C
        query_head_backward(dsample + d.query_offset(h), w, sample + d.query_offset(h), sample + d.key_offset(kv),
                            sample + d.value_offset(kv), py + out, pdy + out, pl + (b * d.H + h) * d.T, mrow, docs,
                            opt, d);
      }
      T* dk = dsample + d.key_offset(kv);
      T* dv = dsample + d.value_offset(kv);
      for (std::int64_t j = 0; j < d.T; ++j)
        for (std::int64_t c = 0; c < d.hd; ++c) {
          dk[j * ld + c] = from_float<T>(w.dk_sum[std::size_t(j * d.hd + c)]);
          dv[j * ld + c] = from_float<T>(w.dv_sum[std::size_t(j * d.hd + c)]);
        }
    }
  }
}

}  // namespace

void attention_forward(Tensor& y, Tensor& lse, const Tensor& qkv, const AttentionOptions& opt) {
  if (!runs_natively(qkv.dtype())) {
    TIDAL_ASSERT(y.dtype() == qkv.dtype(), "attention y {} for qkv {}", y.str(), qkv.str());
    Tensor y32 = Tensor::empty(y.shape());
    cpu::attention_forward(y32, lse, widened(qkv), opt);
    cast(y, y32);
    return;
  }
  const Dims d = check(qkv, lse, opt);
  expect_cpu_contiguous(y, "attention y");
  TIDAL_ASSERT(y.shape() == Shape({d.B, d.T, d.C}) && y.dtype() == qkv.dtype(), "attention y {}", y.str());
  if (qkv.dtype() == DType::bf16) forward_kernel<bf16>(y, lse, qkv, opt, d);
  else forward_kernel<float>(y, lse, qkv, opt, d);
}

void attention_backward(Tensor& dqkv, const Tensor& dy, const Tensor& qkv, const Tensor& y, const Tensor& lse,
                        const AttentionOptions& opt) {
  if (!runs_natively(qkv.dtype())) {
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
  TIDAL_ASSERT(dy.shape() == Shape({d.B, d.T, d.C}) && dy.dtype() == qkv.dtype(), "attention dy {}", dy.str());
  TIDAL_ASSERT(y.shape() == dy.shape() && y.dtype() == qkv.dtype(), "attention y {}", y.str());
  if (qkv.dtype() == DType::bf16) backward_kernel<bf16>(dqkv, dy, qkv, y, lse, opt, d);
  else backward_kernel<float>(dqkv, dy, qkv, y, lse, opt, d);
}

double causal_work_share(std::int64_t keys) {
  double computed = 0;  // the scores of every block of queries [i0, i1) against keys [0, i1)
  for (std::int64_t i0 = 0; i0 < keys; i0 += kQueryBlock) {
    const std::int64_t i1 = std::min(keys, i0 + kQueryBlock);
    computed += double(i1 - i0) * double(i1);
  }
  return keys > 0 ? computed / (double(keys) * double(keys)) : 1.0;
}

}  // namespace tidal::ops::cpu
