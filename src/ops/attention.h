// Multi-head scaled dot-product self-attention on a fused qkv projection, with causal and key
// padding masks. Both backends keep the probabilities [B, H, T, T] for backward.
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace tidal::ops {

struct AttentionOptions {
  int n_head = 1;
  bool causal = false;
  const Tensor* key_mask = nullptr;  // [B, T] i32: 1 = real token, 0 = padding (never attended)
};

// The shapes, checked for every backend: qkv [B, T, 3C], probs [B, H, T, T] fp32, key_mask
// [B, T] i32; hd = C / H.
struct AttentionDims {
  std::int64_t B, T, C, H, hd;
};
AttentionDims attention_dims(const Tensor& qkv, const Tensor& probs, const AttentionOptions& opt);

namespace cpu {
void attention_forward(Tensor& y, Tensor& probs, const Tensor& qkv, const AttentionOptions& opt);
void attention_backward(Tensor& dqkv, const Tensor& dy, const Tensor& qkv, const Tensor& probs,
                        const AttentionOptions& opt);
}  // namespace cpu
#if TIDAL_CUDA
namespace cuda {
void attention_forward(Tensor& y, Tensor& probs, const Tensor& qkv, const AttentionOptions& opt);
void attention_backward(Tensor& dqkv, const Tensor& dy, const Tensor& qkv, const Tensor& probs,
                        const AttentionOptions& opt);
}  // namespace cuda
#endif

// qkv: [B, T, 3C] (q | k | v along the last dim, heads contiguous inside each); y: [B, T, C];
// probs: [B, H, T, T] fp32. A query whose every key is masked gets a zero output.
inline void attention_forward(Tensor& y, Tensor& probs, const Tensor& qkv, const AttentionOptions& opt) {
  TIDAL_OPS_DISPATCH(qkv, attention_forward, y, probs, qkv, opt);
}
// dqkv is written.
inline void attention_backward(Tensor& dqkv, const Tensor& dy, const Tensor& qkv, const Tensor& probs,
                               const AttentionOptions& opt) {
  TIDAL_OPS_DISPATCH(qkv, attention_backward, dqkv, dy, qkv, probs, opt);
}

}  // namespace tidal::ops
