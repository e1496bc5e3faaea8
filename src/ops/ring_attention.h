// Attention of one rank's queries against the sequence one key/value block at a time, flash-style:
// the pieces of ring self-attention (colossal-ai.txt sec. II-B-3, Fig. 8) with FlashAttention-2's
// online softmax, so no rank ever holds the [Tq, T] probabilities of its queries. Each rank holds
// positions [first_query, first_query + Tq) of every sequence; the key/value blocks of the other
// positions arrive around the ring.
//
// Forward:  y = 0, lse = -inf, sum = 0; forward(block) for every block, in any order; finish.
//           Between blocks y holds the unnormalised output, lse each row's running maximum score
//           and sum its running sum of exp(score - maximum); finish divides and leaves lse =
//           maximum + log(sum), the row's log-sum-exp over every key it attends.
// Backward: backward(block) for every block: each recomputes its probabilities from lse
//           (p = exp(s - lse)), adds into dq and this rank's share of the block's gradient dkv.
// Saved between them: q, the rank's own key/value block, y and lse: O(T / N) per rank.
//
// q, y, dy, dq are [B, Tq, C] (C = H * head width, heads contiguous); a key/value block kv and its
// gradient dkv are [B, Tk, 2 Ckv]: the Hkv key heads then the Hkv value heads (ops/attention.h's
// qkv layout without the queries), Ckv = Hkv * head width. Grouped-query heads as in
// ops/attention.h: query head h attends with kv head kv_head_of(h, Hkv); q and dq hold the query
// heads in order h, y and dy in the grouped order output_head(h). So the blocks that travel the
// ring are Hkv heads wide and no kv head is copied up to H. A block whose every key comes after
// every query under the causal mask, or lies outside their documents (packed documents:
// AttentionOptions::doc_positions over the whole sequence), is skipped. fp32 only.
//
// Every operand may be a view whose last dimension is contiguous: a run of a rank's positions
// (a slice along dim 1 of q, y, dy, dq, kv, dkv; along dim 2 of lse and sum) is passed as it
// lies, so a zig-zag rank's two runs need no copies (nn/sp/ring_attention.cpp).
#pragma once

#include "core/tensor.h"
#include "ops/attention.h"
#include "ops/dispatch.h"

namespace tidal::ops {

struct RingAttentionOptions {
  int n_head = 1;
  int n_kv_head = 0;                 // key/value heads; 0 = n_head
  bool causal = false;
  std::int64_t first_query = 0;      // global position of this rank's query 0
  const Tensor* key_mask = nullptr;  // [B, T] i32 over the whole sequence: 1 = real, 0 = padding
  const Tensor* doc_positions = nullptr;  // [B, T] i32 over the whole sequence (ops/attention.h)
};

// The shapes, checked for every backend: this rank's queries (or their output / gradient) `local`
// [B, Tq, C] against the per-row statistics `rows` [B, H, Tq] fp32; key_mask [B, T] i32.
struct RingAttentionDims {
  std::int64_t B, H, Hkv, Tq, C, hd;
  float scale;  // 1 / sqrt(hd)
  constexpr std::int64_t kv_width() const { return Hkv * hd; }
  constexpr std::int64_t block_width() const { return 2 * Hkv * hd; }  // a key/value block's row
  constexpr std::int64_t group() const { return H / Hkv; }  // query heads per kv head
  // Where head h's columns start (constexpr: the GPU kernels take the dims by value): in q / dq
  // (query order), in y / dy (grouped order), and its kv head's key and value in a block.
  constexpr std::int64_t query_offset(std::int64_t h) const { return h * hd; }
  constexpr std::int64_t output_offset(std::int64_t h) const { return output_head(h, H, Hkv) * hd; }
  constexpr std::int64_t key_offset(std::int64_t h) const { return kv_head_of(h, Hkv) * hd; }
  constexpr std::int64_t value_offset(std::int64_t h) const { return kv_width() + kv_head_of(h, Hkv) * hd; }
};
// Element (b, i, c) of a 3-D view whose last dimension is contiguous: p[b batch + i row + c].
template <class T>
struct RowsView {
  T* p;
  std::int64_t batch, row;
  constexpr T* at(std::int64_t b, std::int64_t i) const { return p + b * batch + i * row; }
};
template <class T>
RowsView<T> rows_view(const Tensor& t) {
  return {static_cast<T*>(t.raw()), t.strides()[0], t.strides()[1]};
}
// The checks every backend makes on each piece's operands (3-D fp32 views with contiguous rows on
// `device`, shapes that agree, a key mask [B, T] i32 and the block inside it); return the dims.
// A block's Tk is its dim(1).
RingAttentionDims check_ring_forward(const Tensor& y, const Tensor& lse, const Tensor& sum, const Tensor& q,
                                     const Tensor& kv, std::int64_t first_key, const RingAttentionOptions& opt,
                                     Device::Kind device);
RingAttentionDims check_ring_finish(const Tensor& y, const Tensor& lse, const Tensor& sum,
                                    const RingAttentionOptions& opt, Device::Kind device);
RingAttentionDims check_ring_backward(const Tensor& dq, const Tensor& dkv, const Tensor& q, const Tensor& kv,
                                      const Tensor& y, const Tensor& dy, const Tensor& lse, std::int64_t first_key,
                                      const RingAttentionOptions& opt, Device::Kind device);
// Keys [lo, hi) of a block.
struct KeySpan {
  std::int64_t lo, hi;
  constexpr bool empty() const { return hi <= lo; }
};
// The keys of a block at first_key (Tk of them) that query i (at global position first_query + i)
// of a sample with documents `docs` (over the whole sequence; Documents{} for one) may attend
// before the key mask: its document's, up to itself under the causal mask. Over a run of
// queries lo and hi only grow, so the keys of queries [i0, i1) are [span(i0).lo, span(i1 - 1).hi).
// constexpr: the GPU kernels call it too.
constexpr KeySpan visible_keys(bool causal, const Documents& docs, std::int64_t first_query, std::int64_t first_key,
                               std::int64_t Tk, std::int64_t i) {
  const std::int64_t g = first_query + i;
  const std::int64_t end = causal ? g + 1 : docs.pos != nullptr ? docs.end(g) : first_key + Tk;
  std::int64_t lo = docs.start(g) - first_key, hi = end - first_key;
  lo = lo < 0 ? 0 : lo > Tk ? Tk : lo;
  hi = hi < lo ? lo : hi > Tk ? Tk : hi;
  return {lo, hi};
}

// The share of a block's [Tq, Tk] (query, key) pairs its queries see, one document and no key
// mask (FlashAttention-2's count of the work: the visible pairs).
double visible_share(bool causal, std::int64_t first_query, std::int64_t first_key, std::int64_t Tq, std::int64_t Tk);

namespace cpu {
// The share of a block's [Tq, Tk] scores these kernels compute, one document and no key mask:
// each tile of queries runs to its last query's visible key, a tile that sees none is skipped
// (so a block before every query computes whole, one after them nothing, a diagonal block as
// ops::cpu::causal_work_share).
double ring_work_share(bool causal, std::int64_t first_query, std::int64_t first_key, std::int64_t Tq, std::int64_t Tk);
void ring_attention_forward(Tensor& y, Tensor& lse, Tensor& sum, const Tensor& q, const Tensor& kv,
                            std::int64_t first_key, const RingAttentionOptions& opt);
void ring_attention_finish(Tensor& y, Tensor& lse, const Tensor& sum, const RingAttentionOptions& opt);
void ring_attention_backward(Tensor& dq, Tensor& dkv, const Tensor& q, const Tensor& kv, const Tensor& y,
                             const Tensor& dy, const Tensor& lse, std::int64_t first_key,
                             const RingAttentionOptions& opt);
}  // namespace cpu
namespace meta {  // ops/meta/: what the op costs, on meta tensors
void ring_attention_forward(Tensor& y, Tensor& lse, Tensor& sum, const Tensor& q, const Tensor& kv,
                            std::int64_t first_key, const RingAttentionOptions& opt);
void ring_attention_finish(Tensor& y, Tensor& lse, const Tensor& sum, const RingAttentionOptions& opt);
void ring_attention_backward(Tensor& dq, Tensor& dkv, const Tensor& q, const Tensor& kv, const Tensor& y,
                             const Tensor& dy, const Tensor& lse, std::int64_t first_key,
                             const RingAttentionOptions& opt);
}  // namespace meta
#if TIDAL_CUDA
namespace cuda {
void ring_attention_forward(Tensor& y, Tensor& lse, Tensor& sum, const Tensor& q, const Tensor& kv,
                            std::int64_t first_key, const RingAttentionOptions& opt);
void ring_attention_finish(Tensor& y, Tensor& lse, const Tensor& sum, const RingAttentionOptions& opt);
void ring_attention_backward(Tensor& dq, Tensor& dkv, const Tensor& q, const Tensor& kv, const Tensor& y,
                             const Tensor& dy, const Tensor& lse, std::int64_t first_key,
                             const RingAttentionOptions& opt);
}  // namespace cuda
#endif

// Folds the block kv (keys at [first_key, first_key + Tk)) into the running y, lse (maximum) and
// sum of this rank's queries.
inline void ring_attention_forward(Tensor& y, Tensor& lse, Tensor& sum, const Tensor& q, const Tensor& kv,
                                   std::int64_t first_key, const RingAttentionOptions& opt) {
  TIDAL_OPS_DISPATCH(q, ring_attention_forward, y, lse, sum, q, kv, first_key, opt);
}
// After the last block: y /= sum, lse = maximum + log(sum). A query whose every key is masked
// gets a zero output and lse = +inf (every p = 0), as ops::attention_forward.
inline void ring_attention_finish(Tensor& y, Tensor& lse, const Tensor& sum, const RingAttentionOptions& opt) {
  TIDAL_OPS_DISPATCH(y, ring_attention_finish, y, lse, sum, opt);
}
// dq += dS K / sqrt(hd) over the block's keys, dkv += this rank's queries' share of the block's
// key and value gradients (a kv head's summed over the query heads that attend with it, in
// query_head_of order), with P = exp(S - lse) and dS = P (dY V^T - rowsum(dY * Y)).
inline void ring_attention_backward(Tensor& dq, Tensor& dkv, const Tensor& q, const Tensor& kv, const Tensor& y,
                                    const Tensor& dy, const Tensor& lse, std::int64_t first_key,
                                    const RingAttentionOptions& opt) {
  TIDAL_OPS_DISPATCH(q, ring_attention_backward, dq, dkv, q, kv, y, dy, lse, first_key, opt);
}

}  // namespace tidal::ops
