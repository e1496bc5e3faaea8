#include "ops/ring_attention.h"

#include <cmath>

namespace tidal::ops {

RingAttentionDims ring_attention_dims(const Tensor& local, const Tensor& rows, const RingAttentionOptions& opt) {
  TIDAL_ASSERT(local.dtype() == DType::f32 && rows.dtype() == DType::f32, "ring attention is fp32: {} {}", local.str(),
               rows.str());
  TIDAL_ASSERT(local.ndim() == 3 && rows.ndim() == 3, "ring attention queries {} rows {}", local.str(), rows.str());
  RingAttentionDims d{local.dim(0), opt.n_head, opt.n_kv_head == 0 ? opt.n_head : opt.n_kv_head,
                      local.dim(1), local.dim(2), 0, 0.0f};
  TIDAL_ASSERT(d.H > 0 && d.C % d.H == 0, "ring attention: {} channels in {} heads", d.C, d.H);
  TIDAL_ASSERT(d.Hkv > 0 && d.H % d.Hkv == 0, "ring attention: {} query heads in {} kv heads", d.H, d.Hkv);
  TIDAL_ASSERT(rows.shape() == Shape({d.B, d.H, d.Tq}), "ring attention rows {} for queries {}", rows.str(),
               local.str());
  d.hd = d.C / d.H;
  d.scale = 1.0f / std::sqrt(float(d.hd));
  if (opt.key_mask)
    TIDAL_ASSERT(opt.key_mask->dtype() == DType::i32 && opt.key_mask->ndim() == 2 && opt.key_mask->dim(0) == d.B,
                 "ring attention key_mask {}", opt.key_mask->str());
  return d;
}

std::int64_t ring_attention_block(const RingAttentionDims& d, const Tensor& block, std::int64_t first_key,
                                  const RingAttentionOptions& opt) {
  TIDAL_ASSERT(block.dtype() == DType::f32 && block.ndim() == 3 && block.dim(0) == d.B, "ring attention block {}",
               block.str());
  TIDAL_ASSERT(block.dim(2) == d.block_width(), "ring attention: a key/value block {} for {} kv heads of width {}",
               block.str(), d.Hkv, d.hd);
  const std::int64_t Tk = block.dim(1);
  TIDAL_ASSERT(first_key >= 0 && (opt.key_mask == nullptr || first_key + Tk <= opt.key_mask->dim(1)),
               "key block [{}, {}) outside the key mask", first_key, first_key + Tk);
  return Tk;
}

}  // namespace tidal::ops
