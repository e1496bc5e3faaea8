// Multi-head scaled dot-product self-attention on a fused qkv projection, with causal and key
// padding masks, computed flash-style (FlashAttention-2's schedule: blocks of queries against
// blocks of keys with an online softmax). The [B, H, T, T] probabilities are never kept: forward
// saves each query's log-sum-exp, and backward recomputes the probabilities block by block from
// it, so attention's saved state is O(T), not O(T^2).
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace tidal::ops {

struct AttentionOptions {
  int n_head = 1;
  bool causal = false;
  const Tensor* key_mask = nullptr;  // [B, T] i32: 1 = real token, 0 = padding (never attended)
};

// The shapes, checked for every backend: qkv [B, T, 3C], lse [B, H, T] fp32, key_mask [B, T]
// i32; hd = C / H.
struct AttentionDims {
  std::int64_t B, T, C, H, hd;
};
AttentionDims attention_dims(const Tensor& qkv, const Tensor& lse, const AttentionOptions& opt);

namespace cpu {
void attention_forward(Tensor& y, Tensor& lse, const Tensor& qkv, const AttentionOptions& opt);
void attention_backward(Tensor& dqkv, const Tensor& dy, const Tensor& qkv, const Tensor& y, const Tensor& lse,
                        const AttentionOptions& opt);
}  // namespace cpu
#if TIDAL_CUDA
namespace cuda {
void attention_forward(Tensor& y, Tensor& lse, const Tensor& qkv, const AttentionOptions& opt);
void attention_backward(Tensor& dqkv, const Tensor& dy, const Tensor& qkv, const Tensor& y, const Tensor& lse,
                        const AttentionOptions& opt);
}  // namespace cuda
#endif

// qkv: [B, T, 3C] (q | k | v along the last dim, heads contiguous inside each); y: [B, T, C] in
// qkv's dtype; lse: [B, H, T] fp32, lse[b, h, i] = log sum_j exp(s_ij) over the keys j query i
// attends, s_ij = q_i . k_j / sqrt(hd) (so p_ij = exp(s_ij - lse)). A query whose every key is
// masked gets a zero output and lse = +inf (every p_ij = 0).
inline void attention_forward(Tensor& y, Tensor& lse, const Tensor& qkv, const AttentionOptions& opt) {
  TIDAL_OPS_DISPATCH(qkv, attention_forward, y, lse, qkv, opt);
}
// y and lse are forward's outputs; dqkv is written.
inline void attention_backward(Tensor& dqkv, const Tensor& dy, const Tensor& qkv, const Tensor& y, const Tensor& lse,
                               const AttentionOptions& opt) {
  TIDAL_OPS_DISPATCH(qkv, attention_backward, dqkv, dy, qkv, y, lse, opt);
}

}  // namespace tidal::ops
