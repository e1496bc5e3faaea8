#include "ops/attention.h"

namespace tidal::ops {

AttentionDims attention_dims(const Tensor& qkv, const Tensor& lse, const AttentionOptions& opt) {
  TIDAL_ASSERT(lse.dtype() == DType::f32, "attention log-sum-exp is fp32, got {}", lse.str());
  const std::int64_t H = opt.n_head, Hkv = opt.n_kv_head == 0 ? H : opt.n_kv_head;
  TIDAL_CHECK(H > 0 && Hkv > 0 && H % Hkv == 0,
              "attention: {} query heads cannot share {} key/value heads; n_head must be a positive multiple of "
              "n_kv_head (or n_kv_head 0 for one kv head per query head)",
              H, opt.n_kv_head);
  TIDAL_ASSERT(qkv.ndim() == 3 && qkv.dim(2) % (H + 2 * Hkv) == 0,
               "attention qkv {} for {} query and {} key/value heads", qkv.str(), H, Hkv);
  const std::int64_t hd = qkv.dim(2) / (H + 2 * Hkv);
  const AttentionDims d{qkv.dim(0), qkv.dim(1), H * hd, H, Hkv, hd};
  TIDAL_ASSERT(lse.shape() == Shape({d.B, d.H, d.T}), "attention lse {}", lse.str());
  // A key mask and a document table: an int32 per position of each sample.
  const auto per_position = [&](const Tensor& t) {
    return t.dtype() == DType::i32 && t.ndim() == 2 && t.dim(0) == d.B && t.dim(1) == d.T;
  };
  if (opt.key_mask) TIDAL_ASSERT(per_position(*opt.key_mask), "attention key_mask {}", opt.key_mask->str());
  if (opt.doc_positions)
    TIDAL_ASSERT(per_position(*opt.doc_positions), "attention doc_positions {}", opt.doc_positions->str());
  return d;
}

}  // namespace tidal::ops
