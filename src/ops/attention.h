// Multi-head scaled dot-product self-attention on a fused qkv projection, with causal, key
// padding and document masks, computed flash-style (FlashAttention-2's schedule: blocks of queries against
// blocks of keys with an online softmax). The [B, H, T, T] probabilities are never kept: forward
// saves each query's log-sum-exp, and backward recomputes the probabilities block by block from
// it, so attention's saved state is O(T), not O(T^2).
#pragma once

#include "core/tensor.h"
#include "ops/attention_kernels.h"
#include "ops/dispatch.h"

namespace tidal::ops {

struct AttentionOptions {
  int n_head = 1;
  int n_kv_head = 0;  // key/value heads; 0 = n_head
  bool causal = false;
  const Tensor* key_mask = nullptr;  // [B, T] i32: 1 = real token, 0 = padding (never attended)
  // [B, T] i32: each token's position in its document, where a sequence packs several (0 starts
  // one; data.cross_document_attention = false). A query attends only the keys of its own
  // document. Null: the sequence is one document.
  const Tensor* doc_positions = nullptr;
  AttentionKernels kernels = AttentionKernels::automatic;  // on a GPU: cuDNN's or tidal's own
};

// The documents of one sample's positions pos[0, T) (AttentionOptions::doc_positions; null pos =
// one document): token i's document runs from i - pos[i] (a sequence's first token may continue
// a document cut at the window's start: its document starts at 0) to the next token at position
// 0. The documents are runs, so the keys of a run of queries are a run too, and a block of keys
// wholly outside it is never computed. constexpr: the GPU kernels call it too.
struct Documents {
  const std::int32_t* pos = nullptr;
  std::int64_t T = 0;
  constexpr std::int64_t start(std::int64_t i) const {
    if (pos == nullptr) return 0;
    const std::int64_t s = i - pos[i];
    return s < 0 ? 0 : s;
  }
  constexpr std::int64_t end(std::int64_t i) const {
    if (pos == nullptr) return T;
    std::int64_t j = i + 1;
    while (j < T && pos[j] != 0) ++j;
    return j;
  }
};

// The key/value head that query head h attends with: the heads are dealt round-robin, h % Hkv.
// And its inverse: the i-th (i < H / Hkv) of the query heads that attend with kv head g, in
// ascending order (g, g + Hkv, g + 2 Hkv, ...), the order backward sums their dK and dV in.
// Every backend maps heads through these two (they change together).
constexpr std::int64_t kv_head_of(std::int64_t h, std::int64_t n_kv_head) { return h % n_kv_head; }
constexpr std::int64_t query_head_of(std::int64_t g, std::int64_t i, std::int64_t n_kv_head) {
  return g + i * n_kv_head;
}
// y's heads come grouped by kv head (Hugging Face's order, kv head g's queries at g H/Hkv ..):
// query head h = i Hkv + g (the i-th of kv head g's) writes slot g H/Hkv + i. So under tensor
// parallelism a rank's heads fill one contiguous block of y's features, the output projection's
// input split (nn/attention.h).
constexpr std::int64_t output_head(std::int64_t h, std::int64_t n_head, std::int64_t n_kv_head) {
  return kv_head_of(h, n_kv_head) * (n_head / n_kv_head) + h / n_kv_head;
}

// The shapes, checked for every backend: qkv [B, T, (H + 2 Hkv) hd], lse [B, H, T] fp32,
// key_mask [B, T] i32; C = H hd is the width of the queries (and of y).
struct AttentionDims {
  std::int64_t B, T, C, H, Hkv, hd;
  // qkv's row: H query heads, Hkv key heads, Hkv value heads; where each head's columns start.
  std::int64_t qkv_width() const { return C + 2 * Hkv * hd; }
  std::int64_t query_offset(std::int64_t h) const { return h * hd; }
  std::int64_t key_offset(std::int64_t g) const { return C + g * hd; }
  std::int64_t value_offset(std::int64_t g) const { return C + (Hkv + g) * hd; }
  // Where query head h's output starts in y's row: the heads of kv head 0 first, then those of
  // kv head 1, ... (grouped order; with Hkv = H or 1, h itself).
  std::int64_t output_offset(std::int64_t h) const { return output_head(h, H, Hkv) * hd; }
};
AttentionDims attention_dims(const Tensor& qkv, const Tensor& lse, const AttentionOptions& opt);

namespace cpu {
void attention_forward(Tensor& y, Tensor& lse, const Tensor& qkv, const AttentionOptions& opt);
void attention_backward(Tensor& dqkv, const Tensor& dy, const Tensor& qkv, const Tensor& y, const Tensor& lse,
                        const AttentionOptions& opt);
// Under a causal mask over `keys` positions, the share of the [keys, keys] scores these kernels
// compute: each block of queries runs to its last query's key, so 1/2 plus half a block's
// diagonal (0.75 at 128 keys, 0.53 at 1024; 1 up to a block).
double causal_work_share(std::int64_t keys);
}  // namespace cpu
namespace meta {  // ops/meta/: what the op costs, on meta tensors
void attention_forward(Tensor& y, Tensor& lse, const Tensor& qkv, const AttentionOptions& opt);
void attention_backward(Tensor& dqkv, const Tensor& dy, const Tensor& qkv, const Tensor& y, const Tensor& lse,
                        const AttentionOptions& opt);
}  // namespace meta
#if TIDAL_CUDA
namespace cuda {
void attention_forward(Tensor& y, Tensor& lse, const Tensor& qkv, const AttentionOptions& opt);
void attention_backward(Tensor& dqkv, const Tensor& dy, const Tensor& qkv, const Tensor& y, const Tensor& lse,
                        const AttentionOptions& opt);
}  // namespace cuda
#endif

// qkv: [B, T, (H + 2 Hkv) hd]: the H query heads (head h at columns [h hd, (h + 1) hd)), then
// the Hkv key heads, then the Hkv value heads (with Hkv = H, the familiar [q | k | v] of width
// 3C); query head h attends with kv head kv_head_of(h, Hkv). y: [B, T, C = H hd] in qkv's dtype,
// query head h's output at head slot output_head(h) (grouped by kv head);
// lse: [B, H, T] fp32, lse[b, h, i] = log sum_j exp(s_ij) over the keys j query i attends (not
// padding, not after i when causal, in i's document), s_ij = q_i . k_j / sqrt(hd) (so p_ij =
// exp(s_ij - lse)). A query whose every key is masked gets a zero output and lse = +inf (every
// p_ij = 0).
inline void attention_forward(Tensor& y, Tensor& lse, const Tensor& qkv, const AttentionOptions& opt) {
  TIDAL_OPS_DISPATCH(qkv, attention_forward, y, lse, qkv, opt);
}
// y and lse are forward's outputs; dqkv [B, T, (H + 2 Hkv) hd] is written whole, the key and
// value gradients of a kv head summed over the query heads that attend with it.
inline void attention_backward(Tensor& dqkv, const Tensor& dy, const Tensor& qkv, const Tensor& y, const Tensor& lse,
                               const AttentionOptions& opt) {
  TIDAL_OPS_DISPATCH(qkv, attention_backward, dqkv, dy, qkv, y, lse, opt);
}

}  // namespace tidal::ops
