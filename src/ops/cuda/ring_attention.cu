// GPU ring-attention blocks, flash-style (the CPU backend's pieces, ops/cpu/ring_attention.cpp):
// one warp per row, its lanes holding a head's hd columns (at most kMaxHead, kPerLane each), the
// scores taken one key at a time with a warp sum. Forward's warp is a query row and keeps the
// row's running maximum, sum and output in registers across the block's keys (FlashAttention-2's
// online softmax). Backward runs two kernels that both recompute p = exp(s - lse): a warp per
// query row for dq, and a warp per key row of the block for dk and dv, which walks the kv head's
// query heads in query_head_of order and every query: each output has one writer, no atomics,
// the same sums on every run. fp32 only, like the CPU backend. Simple rather than fast: the
// ring's blocks are the unit of overlap with communication, and these kernels are the GPU
// backend's reference until tensor-core ones replace them.
#include "ops/ring_attention.h"

#include "ops/cuda/common.cuh"

#include <cmath>

namespace tidal::ops::cuda {
namespace {

using Dims = RingAttentionDims;

constexpr int kWarpsPerBlock = 8;
constexpr int kPerLane = 8;
constexpr std::int64_t kMaxHead = 32 * kPerLane;  // head width a warp holds

// What a kernel needs of a block of keys, by value.
struct Block {
  RowsView<const float> kv;         // [B, Tk, 2 Ckv]
  std::int64_t Tk, first_key;
  const std::int32_t* key_mask;     // [B, mask_T] or null
  std::int64_t mask_T, first_query;
  bool causal;
  const std::int32_t* doc_pos;      // [B, doc_T] positions in documents, or null
  std::int64_t doc_T;
};

__device__ __forceinline__ Documents documents(const Block& k, std::int64_t b) {
  return k.doc_pos ? Documents{k.doc_pos + b * k.doc_T, k.doc_T} : Documents{};
}

// Query i's keys of the block (ops/ring_attention.h).
__device__ __forceinline__ KeySpan keys_of(const Block& k, std::int64_t b, std::int64_t i) {
  return visible_keys(k.causal, documents(k, b), k.first_query, k.first_key, k.Tk, i);
}

__device__ __forceinline__ bool real_key(const Block& k, std::int64_t b, std::int64_t j) {
  return k.key_mask == nullptr || k.key_mask[b * k.mask_T + k.first_key + j] != 0;
}

// Dot product of two head rows of d.hd columns, lanes striding by 32, summed over the warp.
__device__ __forceinline__ float row_dot(const float* a, const float* b, std::int64_t hd, int lane) {
  float s = 0.0f;
  for (std::int64_t c = lane; c < hd; c += 32) s += a[c] * b[c];
  return warp_sum(s);
}

__device__ __forceinline__ std::int64_t warp_index() {
  return (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
}

// Row r of [B, H, Tq]: its sample, head and query.
struct Row {
  std::int64_t b, h, i;
};
__device__ __forceinline__ Row row_of(const Dims& d, std::int64_t r) {
  return {r / (d.H * d.Tq), (r / d.Tq) % d.H, r % d.Tq};
}

// This rank's queries' operands as views (ops/ring_attention.h).
struct Queries {
  RowsView<const float> q, y, dy, lse;
};
struct State {
  RowsView<float> y, lse, sum;
};

__global__ void forward_kernel(State st, RowsView<const float> q, Block k, Dims d) {
  const std::int64_t r = warp_index();
  if (r >= d.B * d.H * d.Tq) return;
  const int lane = threadIdx.x % 32;
  const Row w = row_of(d, r);
  const float* qi = q.at(w.b, w.i) + d.query_offset(w.h);
  float* out = st.y.at(w.b, w.i) + d.output_offset(w.h);
  float *pm = st.lse.at(w.b, w.h) + w.i, *pl = st.sum.at(w.b, w.h) + w.i;
  const KeySpan keys = keys_of(k, w.b, w.i);
  float acc[kPerLane];
  for (int c = 0; c < kPerLane; ++c) acc[c] = lane + 32 * c < d.hd ? out[lane + 32 * c] : 0.0f;
  float m = *pm, l = *pl;
  for (std::int64_t j = keys.lo; j < keys.hi; ++j) {
    if (!real_key(k, w.b, j)) continue;
    const float* row = k.kv.at(w.b, j);
    const float s = row_dot(qi, row + d.key_offset(w.h), d.hd, lane) * d.scale;
    const float m_new = fmaxf(m, s), alpha = expf(m - m_new), p = expf(s - m_new);
    l = l * alpha + p;
    m = m_new;
    const float* v = row + d.value_offset(w.h);
    for (int c = 0; c < kPerLane; ++c)
      if (lane + 32 * c < d.hd) acc[c] = acc[c] * alpha + p * v[lane + 32 * c];
  }
  for (int c = 0; c < kPerLane; ++c)
    if (lane + 32 * c < d.hd) out[lane + 32 * c] = acc[c];
  if (lane == 0) {
    *pm = m;
    *pl = l;
  }
}

__global__ void finish_kernel(State st, Dims d) {
  TIDAL_CUDA_FOR(r, d.B * d.H * d.Tq) {
    const Row w = row_of(d, r);
    const float l = st.sum.at(w.b, w.h)[w.i];
    float* m = st.lse.at(w.b, w.h) + w.i;
    float* out = st.y.at(w.b, w.i) + d.output_offset(w.h);
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (std::int64_t c = 0; c < d.hd; ++c) out[c] *= inv;
    *m = l > 0.0f ? *m + logf(l) : INFINITY;
  }
}

// p and dS of query row (b, h, i) against key j (its key and value rows), delta = rowsum(dY * Y).
__device__ __forceinline__ void probs_at(float& p, float& ds, const Queries& qs, const Dims& d, std::int64_t b,
                                         std::int64_t h, std::int64_t i, const float* key_row, float delta,
                                         int lane) {
  const float* qi = qs.q.at(b, i) + d.query_offset(h);
  const float* gi = qs.dy.at(b, i) + d.output_offset(h);
  p = expf(row_dot(qi, key_row + d.key_offset(h), d.hd, lane) * d.scale - qs.lse.at(b, h)[i]);
  ds = p * (row_dot(gi, key_row + d.value_offset(h), d.hd, lane) - delta);
}

__device__ __forceinline__ float delta_of(const Queries& qs, const Dims& d, std::int64_t b, std::int64_t h,
                                          std::int64_t i, int lane) {
  return row_dot(qs.dy.at(b, i) + d.output_offset(h), qs.y.at(b, i) + d.output_offset(h), d.hd, lane);
}

__global__ void query_grad_kernel(RowsView<float> dq, Queries qs, Block k, Dims d) {
  const std::int64_t r = warp_index();
  if (r >= d.B * d.H * d.Tq) return;
  const int lane = threadIdx.x % 32;
  const Row w = row_of(d, r);
  const KeySpan keys = keys_of(k, w.b, w.i);
  const float delta = delta_of(qs, d, w.b, w.h, w.i, lane);
  float* out = dq.at(w.b, w.i) + d.query_offset(w.h);
  float acc[kPerLane] = {};
  for (std::int64_t j = keys.lo; j < keys.hi; ++j) {
    if (!real_key(k, w.b, j)) continue;
    const float* row = k.kv.at(w.b, j);
    float p, ds;
    probs_at(p, ds, qs, d, w.b, w.h, w.i, row, delta, lane);
    const float* key = row + d.key_offset(w.h);
    for (int c = 0; c < kPerLane; ++c)
      if (lane + 32 * c < d.hd) acc[c] += ds * key[lane + 32 * c];
  }
  for (int c = 0; c < kPerLane; ++c)
    if (lane + 32 * c < d.hd) out[lane + 32 * c] += d.scale * acc[c];
}

// A warp per (sample, kv head, key j): dk_j += scale sum dS q_i, dv_j += sum p dY_i over the kv
// head's query heads and the queries that see key j: a run of them (from the key itself under
// the causal mask, inside the key's document).
__global__ void key_value_grad_kernel(RowsView<float> dkv, Queries qs, Block k, Dims d) {
  const std::int64_t r = warp_index();
  if (r >= d.B * d.Hkv * k.Tk) return;
  const int lane = threadIdx.x % 32;
  const std::int64_t b = r / (d.Hkv * k.Tk), g = (r / k.Tk) % d.Hkv, j = r % k.Tk;
  if (!real_key(k, b, j)) return;
  const float* row = k.kv.at(b, j);
  float dk[kPerLane] = {}, dv[kPerLane] = {};
  const Documents docs = documents(k, b);
  const std::int64_t key = k.first_key + j, key_doc = docs.start(key);
  std::int64_t first = (k.causal ? key : key_doc) - k.first_query;
  first = first < 0 ? 0 : first;
  for (std::int64_t t = 0; t < d.group(); ++t) {
    const std::int64_t h = query_head_of(g, t, d.Hkv);
    for (std::int64_t i = first; i < d.Tq; ++i) {
      if (docs.start(k.first_query + i) != key_doc) break;  // the queries past the key's document
      float p, ds;
      probs_at(p, ds, qs, d, b, h, i, row, delta_of(qs, d, b, h, i, lane), lane);
      const float* qi = qs.q.at(b, i) + d.query_offset(h);
      const float* gi = qs.dy.at(b, i) + d.output_offset(h);
      for (int c = 0; c < kPerLane; ++c)
        if (lane + 32 * c < d.hd) {
          dk[c] += ds * qi[lane + 32 * c];
          dv[c] += p * gi[lane + 32 * c];
        }
    }
  }
  float* out = dkv.at(b, j);
  for (int c = 0; c < kPerLane; ++c)
    if (lane + 32 * c < d.hd) {
      out[g * d.hd + lane + 32 * c] += d.scale * dk[c];
      out[d.kv_width() + g * d.hd + lane + 32 * c] += dv[c];
    }
}

void check_head_width(const Dims& d) {
  TIDAL_ASSERT(d.hd <= kMaxHead, "GPU ring attention: head width {} above {}", d.hd, kMaxHead);
}

Block block_of(const Tensor& kv, std::int64_t first_key, const RingAttentionOptions& opt) {
  return {rows_view<const float>(kv), kv.dim(1), first_key,
          opt.key_mask ? ptr<const std::int32_t>(*opt.key_mask) : nullptr, opt.key_mask ? opt.key_mask->dim(1) : 0,
          opt.first_query, opt.causal, opt.doc_positions ? ptr<const std::int32_t>(*opt.doc_positions) : nullptr,
          opt.doc_positions ? opt.doc_positions->dim(1) : 0};
}

unsigned warp_blocks(std::int64_t warps) { return unsigned((warps + kWarpsPerBlock - 1) / kWarpsPerBlock); }

}  // namespace

void ring_attention_forward(Tensor& y, Tensor& lse, Tensor& sum, const Tensor& q, const Tensor& kv,
                            std::int64_t first_key, const RingAttentionOptions& opt) {
  const Dims d = check_ring_forward(y, lse, sum, q, kv, first_key, opt, Device::Kind::cuda);
  check_head_width(d);
  const Block k = block_of(kv, first_key, opt);
  const std::int64_t rows = d.B * d.H * d.Tq;
  if (rows == 0 || visible_keys(opt.causal, Documents{}, opt.first_query, first_key, k.Tk, d.Tq - 1).empty()) return;
  const State st{rows_view<float>(y), rows_view<float>(lse), rows_view<float>(sum)};
  forward_kernel<<<warp_blocks(rows), 32 * kWarpsPerBlock, 0, compute_stream()>>>(st, rows_view<const float>(q), k, d);
  TIDAL_CUDA_CHECK_LAUNCH("ring_attention forward_kernel");
}

void ring_attention_finish(Tensor& y, Tensor& lse, const Tensor& sum, const RingAttentionOptions& opt) {
  const Dims d = check_ring_finish(y, lse, sum, opt, Device::Kind::cuda);
  const std::int64_t rows = d.B * d.H * d.Tq;
  if (rows == 0) return;
  constexpr int kThreads = 256;
  const State st{rows_view<float>(y), rows_view<float>(lse), rows_view<float>(sum)};
  finish_kernel<<<blocks_for(rows, kThreads), kThreads, 0, compute_stream()>>>(st, d);
  TIDAL_CUDA_CHECK_LAUNCH("ring_attention finish_kernel");
}

void ring_attention_backward(Tensor& dq, Tensor& dkv, const Tensor& q, const Tensor& kv, const Tensor& y,
                             const Tensor& dy, const Tensor& lse, std::int64_t first_key,
                             const RingAttentionOptions& opt) {
  const Dims d = check_ring_backward(dq, dkv, q, kv, y, dy, lse, first_key, opt, Device::Kind::cuda);
  check_head_width(d);
  const Block k = block_of(kv, first_key, opt);
  const std::int64_t rows = d.B * d.H * d.Tq, keys = d.B * d.Hkv * k.Tk;
  if (rows == 0 || keys == 0 ||
      visible_keys(opt.causal, Documents{}, opt.first_query, first_key, k.Tk, d.Tq - 1).empty())
    return;
  const Queries qs{rows_view<const float>(q), rows_view<const float>(y), rows_view<const float>(dy),
                   rows_view<const float>(lse)};
  query_grad_kernel<<<warp_blocks(rows), 32 * kWarpsPerBlock, 0, compute_stream()>>>(rows_view<float>(dq), qs, k, d);
  TIDAL_CUDA_CHECK_LAUNCH("ring_attention query_grad_kernel");
  key_value_grad_kernel<<<warp_blocks(keys), 32 * kWarpsPerBlock, 0, compute_stream()>>>(rows_view<float>(dkv), qs,
                                                                                        k, d);
  TIDAL_CUDA_CHECK_LAUNCH("ring_attention key_value_grad_kernel");
}

}  // namespace tidal::ops::cuda
