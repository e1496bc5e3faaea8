#include "ops/attention.h"

namespace tidal::ops {

AttentionDims attention_dims(const Tensor& qkv, const Tensor& lse, const AttentionOptions& opt) {
  TIDAL_ASSERT(lse.dtype() == DType::f32, "attention log-sum-exp is fp32, got {}", lse.str());
  TIDAL_ASSERT(qkv.ndim() == 3 && qkv.dim(2) % 3 == 0, "attention qkv {}", qkv.str());
  AttentionDims d{qkv.dim(0), qkv.dim(1), qkv.dim(2) / 3, opt.n_head, 0};
  TIDAL_ASSERT(d.H > 0 && d.C % d.H == 0, "attention: {} channels, {} heads", d.C, d.H);
  d.hd = d.C / d.H;
  TIDAL_ASSERT(lse.shape() == Shape({d.B, d.H, d.T}), "attention lse {}", lse.str());
  if (opt.key_mask)
    TIDAL_ASSERT(opt.key_mask->dtype() == DType::i32 && opt.key_mask->shape() == Shape({d.B, d.T}),
                 "attention key_mask {}", opt.key_mask->str());
  return d;
}

}  // namespace tidal::ops
