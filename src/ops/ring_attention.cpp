#include "ops/ring_attention.h"

#include <cmath>

namespace tidal::ops {

RingAttentionDims ring_attention_dims(const Tensor& probs, const Tensor& local, const RingAttentionOptions& opt) {
  TIDAL_ASSERT(probs.dtype() == DType::f32 && local.dtype() == DType::f32, "ring attention is fp32: {} {}", probs.str(),
               local.str());
  TIDAL_ASSERT(probs.ndim() == 4 && local.ndim() == 3, "ring attention probs {} queries {}", probs.str(), local.str());
  RingAttentionDims d{probs.dim(0), opt.n_head, opt.n_kv_head == 0 ? opt.n_head : opt.n_kv_head,
                      probs.dim(2), probs.dim(3), local.dim(2), 0, 0.0f};
  TIDAL_ASSERT(d.H > 0 && d.C % d.H == 0 && probs.dim(1) == d.H, "ring attention: {} channels, {} heads, probs {}", d.C,
               d.H, probs.str());
  TIDAL_ASSERT(d.Hkv > 0 && d.H % d.Hkv == 0, "ring attention: {} query heads in {} kv heads", d.H, d.Hkv);
  TIDAL_ASSERT(local.dim(0) == d.B && local.dim(1) == d.Tq, "ring attention probs {} queries {}", probs.str(),
               local.str());
  d.hd = d.C / d.H;
  d.scale = 1.0f / std::sqrt(float(d.hd));
  if (opt.key_mask)
    TIDAL_ASSERT(opt.key_mask->dtype() == DType::i32 && opt.key_mask->shape() == Shape({d.B, d.T}),
                 "ring attention key_mask {}", opt.key_mask->str());
  return d;
}

std::int64_t ring_attention_block(const RingAttentionDims& d, const Tensor& block, std::int64_t first_key) {
  TIDAL_ASSERT(block.dtype() == DType::f32 && block.ndim() == 3 && block.dim(0) == d.B, "ring attention block {}",
               block.str());
  TIDAL_ASSERT(block.dim(2) == d.kv_width(), "ring attention: a key/value block {} for {} kv heads of width {}",
               block.str(), d.Hkv, d.hd);
  const std::int64_t Tk = block.dim(1);
  TIDAL_ASSERT(first_key >= 0 && first_key + Tk <= d.T, "key block [{}, {}) outside {} positions", first_key,
               first_key + Tk, d.T);
  return Tk;
}

}  // namespace tidal::ops
