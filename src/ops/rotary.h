// Rotary position embeddings (RoFormer, Su et al. 2021, as Llama applies them): each query and
// key head's features i and i + hd/2 (i < hd/2) are rotated by the angle p * inv_freq[i] of the
// token's position p, in place on a fused qkv. The angles' cosines and sines come as tables over
// the positions the tensor holds (rotary_tables), so a rank of a sequence ring passes its own;
// or, where every token has a position of its own (packed documents restart them), as tables over
// positions 0, 1, ... that each token's position picks a row of.
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

#include <vector>

namespace tidal::ops {

// Llama 3's frequency scaling (HF rope_type "llama3"): wavelengths beyond
// original_max_positions / low_freq_factor are divided by `factor`, those below
// original_max_positions / high_freq_factor kept, and the band between interpolated.
struct RopeScaling {
  float factor = 0.0f;  // 0: no scaling
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  std::int64_t original_max_positions = 8192;
};

// inv_freq[i] = theta^(-2i / head_dim), i < head_dim / 2, then scaled; in double, rounded to
// fp32 (as transformers computes it in fp32: the tables agree to fp32 rounding).
std::vector<float> rotary_inverse_frequencies(std::int64_t head_dim, double theta, const RopeScaling& scaling = {});
// cos and sin [T, hd/2] fp32 (host) of the angles (first + t) * inv_freq[i].
void rotary_tables(Tensor& cos, Tensor& sin, const std::vector<float>& inv_freq, std::int64_t first);

struct RotaryOptions {
  int n_head = 1;
  int n_kv_head = 1;       // qkv [B, T, (n_head + 2 n_kv_head) hd]: q heads, k heads, v heads
  bool inverse = false;    // rotate by -angle: the backward of a rotation (its transpose)
  // [..., T] i32 on qkv's device, qkv's shape but the last dim: each token's row of cos and sin
  // (below the tables' rows). Null: token t of a sequence takes row t.
  const Tensor* positions = nullptr;
};

namespace cpu {
void rotary_apply(Tensor& qkv, const Tensor& cos, const Tensor& sin, const RotaryOptions& opt);
}  // namespace cpu
namespace meta {  // ops/meta/: what the op costs, on meta tensors
void rotary_apply(Tensor& qkv, const Tensor& cos, const Tensor& sin, const RotaryOptions& opt);
}  // namespace meta
#if TIDAL_CUDA
namespace cuda {
void rotary_apply(Tensor& qkv, const Tensor& cos, const Tensor& sin, const RotaryOptions& opt);
}  // namespace cuda
#endif

// qkv (fp32, bf16 or fp16) in place: the q and k heads rotated (x_i, x_{i+hd/2}) ->
// (x_i cos - x_{i+hd/2} sin, x_{i+hd/2} cos + x_i sin), v untouched; cos, sin [T, hd/2] fp32 on
// qkv's device ([P, hd/2] with opt.positions, every position below P). The backward of
// rotary_apply is rotary_apply with `inverse` on the gradient.
inline void rotary_apply(Tensor& qkv, const Tensor& cos, const Tensor& sin, const RotaryOptions& opt) {
  TIDAL_OPS_DISPATCH(qkv, rotary_apply, qkv, cos, sin, opt);
}

}  // namespace tidal::ops
