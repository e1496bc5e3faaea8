// Attention of one rank's queries against the sequence one block of keys at a time: the pieces
// of ring self-attention (colossal-ai.txt sec. II-B-3, Fig. 8), where each rank holds positions
// [first_query, first_query + Tq) of every sequence and the key and value blocks of the other
// positions arrive around the ring. The scores of all T keys stay in `probs` [B, H, Tq, T]
// (columns [first_key, first_key + Tk) for a block), so the softmax runs over whole rows.
//
// Forward:  scores(block) for every block, softmax, then values(block) for every block.
// Backward: probs_grad(block) and values_grad(block) for every block, softmax_backward, then
//           query_grad(block) and key_grad(block) for every block.
//
// q, y, dy, dq are [B, Tq, C] (C = H * head width, heads contiguous); k, v, dk, dv are
// [B, Tk, Ckv] with Ckv = Hkv * head width: grouped-query heads as in ops/attention.h (query head h
// attends with kv head kv_head_of(h, Hkv); q and dq hold the query heads in order h, y and dy in
// the grouped order output_head(h)), so the blocks that travel the ring are Hkv heads wide and
// no kv head is copied up to H. Blocks wholly after every query under the causal mask are
// skipped (their probabilities are zero).
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
};

// The shapes, checked for every backend (fp32 only): probs [B, H, Tq, T] against this rank's
// queries (or their output / gradient) `local` [B, Tq, C], key_mask [B, T] i32.
struct RingAttentionDims {
  std::int64_t B, H, Hkv, Tq, T, C, hd;
  float scale;  // 1 / sqrt(hd)
  std::int64_t kv_width() const { return Hkv * hd; }
  std::int64_t group() const { return H / Hkv; }  // query heads per kv head
  // Where head h's columns start: in q / dq (query order), in y / dy (grouped order), and its kv
  // head's in a key / value block.
  std::int64_t query_offset(std::int64_t h) const { return h * hd; }
  std::int64_t output_offset(std::int64_t h) const { return output_head(h, H, Hkv) * hd; }
  std::int64_t kv_offset(std::int64_t h) const { return kv_head_of(h, Hkv) * hd; }
};
RingAttentionDims ring_attention_dims(const Tensor& probs, const Tensor& local, const RingAttentionOptions& opt);
// A key / value block [B, Tk, Ckv] at first_key, checked; returns Tk.
std::int64_t ring_attention_block(const RingAttentionDims& d, const Tensor& block, std::int64_t first_key);
// Whether every key of the block comes after every query (all masked when causal).
inline bool after_all_queries(const RingAttentionOptions& opt, const RingAttentionDims& d, std::int64_t first_key) {
  return opt.causal && first_key > opt.first_query + d.Tq - 1;
}

namespace cpu {
void attention_scores(Tensor& probs, const Tensor& q, const Tensor& k, std::int64_t first_key,
                      const RingAttentionOptions& opt);
void attention_softmax(Tensor& probs, const RingAttentionOptions& opt);
void attention_values(Tensor& y, const Tensor& probs, const Tensor& v, std::int64_t first_key,
                      const RingAttentionOptions& opt);
void attention_probs_grad(Tensor& dprobs, const Tensor& dy, const Tensor& v, std::int64_t first_key,
                          const RingAttentionOptions& opt);
void attention_values_grad(Tensor& dv, const Tensor& probs, const Tensor& dy, std::int64_t first_key,
                           const RingAttentionOptions& opt);
void attention_softmax_backward(Tensor& dprobs, const Tensor& probs);
void attention_query_grad(Tensor& dq, const Tensor& dscores, const Tensor& k, std::int64_t first_key,
                          const RingAttentionOptions& opt);
void attention_key_grad(Tensor& dk, const Tensor& dscores, const Tensor& q, std::int64_t first_key,
                        const RingAttentionOptions& opt);
}  // namespace cpu
#if TIDAL_CUDA
namespace cuda {
void attention_scores(Tensor& probs, const Tensor& q, const Tensor& k, std::int64_t first_key,
                      const RingAttentionOptions& opt);
void attention_softmax(Tensor& probs, const RingAttentionOptions& opt);
void attention_values(Tensor& y, const Tensor& probs, const Tensor& v, std::int64_t first_key,
                      const RingAttentionOptions& opt);
void attention_probs_grad(Tensor& dprobs, const Tensor& dy, const Tensor& v, std::int64_t first_key,
                          const RingAttentionOptions& opt);
void attention_values_grad(Tensor& dv, const Tensor& probs, const Tensor& dy, std::int64_t first_key,
                           const RingAttentionOptions& opt);
void attention_softmax_backward(Tensor& dprobs, const Tensor& probs);
void attention_query_grad(Tensor& dq, const Tensor& dscores, const Tensor& k, std::int64_t first_key,
                          const RingAttentionOptions& opt);
void attention_key_grad(Tensor& dk, const Tensor& dscores, const Tensor& q, std::int64_t first_key,
                        const RingAttentionOptions& opt);
}  // namespace cuda
#endif

// probs[:, :, :, block] = Q K_block^T / sqrt(head width).
inline void attention_scores(Tensor& probs, const Tensor& q, const Tensor& k, std::int64_t first_key,
                             const RingAttentionOptions& opt) {
  TIDAL_OPS_DISPATCH(q, attention_scores, probs, q, k, first_key, opt);
}
// In place, over whole rows of T keys: masked keys (causal, padding) get 0; a row with none
// left is all zeros.
inline void attention_softmax(Tensor& probs, const RingAttentionOptions& opt) {
  TIDAL_OPS_DISPATCH(probs, attention_softmax, probs, opt);
}
// y += P[:, :, :, block] V_block.
inline void attention_values(Tensor& y, const Tensor& probs, const Tensor& v, std::int64_t first_key,
                             const RingAttentionOptions& opt) {
  TIDAL_OPS_DISPATCH(y, attention_values, y, probs, v, first_key, opt);
}
// dprobs[:, :, :, block] = dY V_block^T (zeros for a skipped block).
inline void attention_probs_grad(Tensor& dprobs, const Tensor& dy, const Tensor& v, std::int64_t first_key,
                                 const RingAttentionOptions& opt) {
  TIDAL_OPS_DISPATCH(dy, attention_probs_grad, dprobs, dy, v, first_key, opt);
}
// dv += P[:, :, :, block]^T dY: this rank's queries' share of the block's value gradient (a kv
// head's summed over the query heads that attend with it).
inline void attention_values_grad(Tensor& dv, const Tensor& probs, const Tensor& dy, std::int64_t first_key,
                                  const RingAttentionOptions& opt) {
  TIDAL_OPS_DISPATCH(dy, attention_values_grad, dv, probs, dy, first_key, opt);
}
// In place: dprobs -> dscores = P * (dP - rowsum(dP * P)) (the scores' gradient, unscaled).
inline void attention_softmax_backward(Tensor& dprobs, const Tensor& probs) {
  TIDAL_OPS_DISPATCH(probs, attention_softmax_backward, dprobs, probs);
}
// dq += dS[:, :, :, block] K_block / sqrt(head width).
inline void attention_query_grad(Tensor& dq, const Tensor& dscores, const Tensor& k, std::int64_t first_key,
                                 const RingAttentionOptions& opt) {
  TIDAL_OPS_DISPATCH(k, attention_query_grad, dq, dscores, k, first_key, opt);
}
// dk += dS[:, :, :, block]^T Q / sqrt(head width): this rank's queries' share of the block's key
// gradient (a kv head's summed over the query heads that attend with it).
inline void attention_key_grad(Tensor& dk, const Tensor& dscores, const Tensor& q, std::int64_t first_key,
                               const RingAttentionOptions& opt) {
  TIDAL_OPS_DISPATCH(q, attention_key_grad, dk, dscores, q, first_key, opt);
}

}  // namespace tidal::ops
