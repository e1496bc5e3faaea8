#include "ops/ring_attention.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>

namespace tidal::ops {
namespace {

void expect_views(std::initializer_list<const Tensor*> ts, Device::Kind device, const char* what) {
  for (const Tensor* t : ts) {
    TIDAL_ASSERT(t->defined() && t->dtype() == DType::f32 && t->ndim() == 3 && (t->dim(2) <= 1 || t->strides()[2] == 1),
                 "{} must be a 3-D fp32 view with contiguous rows, got {}", what, t->defined() ? t->str() : "undefined");
    TIDAL_ASSERT(t->device().kind == device, "{}: {} on {}", what, t->str(), t->device().str());
  }
}

// This rank's queries (or their output / gradient) `local` [B, Tq, C] against the per-row
// statistics `rows` [B, H, Tq]; the key mask [B, T] i32 where there is one.
RingAttentionDims dims(const Tensor& local, const Tensor& rows, const RingAttentionOptions& opt, Device::Kind device) {
  expect_views({&local, &rows}, device, "ring attention");
  RingAttentionDims d{local.dim(0), opt.n_head, opt.n_kv_head == 0 ? opt.n_head : opt.n_kv_head,
                      local.dim(1), local.dim(2), 0, 0.0f};
  TIDAL_ASSERT(d.H > 0 && d.C % d.H == 0, "ring attention: {} channels in {} heads", d.C, d.H);
  TIDAL_ASSERT(d.Hkv > 0 && d.H % d.Hkv == 0, "ring attention: {} query heads in {} kv heads", d.H, d.Hkv);
  TIDAL_ASSERT(rows.shape() == Shape({d.B, d.H, d.Tq}), "ring attention rows {} for queries {}", rows.str(),
               local.str());
  d.hd = d.C / d.H;
  d.scale = 1.0f / std::sqrt(float(d.hd));
  if (const Tensor* mask = opt.key_mask) {
    TIDAL_ASSERT(mask->dtype() == DType::i32 && mask->ndim() == 2 && mask->dim(0) == d.B && mask->is_contiguous() &&
                     mask->device().kind == device,
                 "ring attention key_mask {}", mask->str());
  }
  if (const Tensor* docs = opt.doc_positions) {
    TIDAL_ASSERT(docs->dtype() == DType::i32 && docs->ndim() == 2 && docs->dim(0) == d.B && docs->is_contiguous() &&
                     docs->device().kind == device && opt.first_query + d.Tq <= docs->dim(1),
                 "ring attention doc_positions {} for queries [{}, {})", docs->str(), opt.first_query,
                 opt.first_query + d.Tq);
  }
  return d;
}

// A key/value block [B, Tk, 2 Ckv] at first_key, inside the key mask's T.
void check_block(const RingAttentionDims& d, const Tensor& block, std::int64_t first_key,
                 const RingAttentionOptions& opt, Device::Kind device) {
  expect_views({&block}, device, "ring attention block");
  TIDAL_ASSERT(block.dim(0) == d.B && block.dim(2) == d.block_width(),
               "ring attention: a key/value block {} for {} kv heads of width {}", block.str(), d.Hkv, d.hd);
  TIDAL_ASSERT(first_key >= 0 && (opt.key_mask == nullptr || first_key + block.dim(1) <= opt.key_mask->dim(1)),
               "key block [{}, {}) outside the key mask", first_key, first_key + block.dim(1));
  TIDAL_ASSERT(opt.doc_positions == nullptr || first_key + block.dim(1) <= opt.doc_positions->dim(1),
               "key block [{}, {}) outside the document positions", first_key, first_key + block.dim(1));
}

}  // namespace

double visible_share(bool causal, std::int64_t first_query, std::int64_t first_key, std::int64_t Tq, std::int64_t Tk) {
  if (Tq <= 0 || Tk <= 0) return 0.0;
  if (!causal) return 1.0;
  // Query i sees keys [0, clamp(v, 0, Tk)) of the block, v = first_query + i + 1 - first_key
  // (visible_keys with one document): the sum over v in [a, b], in closed form (the planner asks
  // this of every block it replays).
  const std::int64_t a = first_query + 1 - first_key, b = a + Tq - 1;
  const std::int64_t rise_lo = std::max<std::int64_t>(a, 1), rise_hi = std::min(b, Tk - 1);  // 0 < v < Tk: v
  const double rising = rise_lo <= rise_hi ? double(rise_lo + rise_hi) * double(rise_hi - rise_lo + 1) / 2 : 0.0;
  const std::int64_t full = b - std::max(a, Tk) + 1;  // v >= Tk: every key
  return (rising + double(std::max<std::int64_t>(0, full)) * double(Tk)) / (double(Tq) * double(Tk));
}

RingAttentionDims check_ring_forward(const Tensor& y, const Tensor& lse, const Tensor& sum, const Tensor& q,
                                     const Tensor& kv, std::int64_t first_key, const RingAttentionOptions& opt,
                                     Device::Kind device) {
  const RingAttentionDims d = dims(q, lse, opt, device);
  expect_views({&y, &sum}, device, "ring attention");
  TIDAL_ASSERT(y.shape() == q.shape() && sum.shape() == lse.shape(), "ring attention y {} q {} sum {} lse {}", y.str(),
               q.str(), sum.str(), lse.str());
  check_block(d, kv, first_key, opt, device);
  return d;
}

RingAttentionDims check_ring_finish(const Tensor& y, const Tensor& lse, const Tensor& sum,
                                    const RingAttentionOptions& opt, Device::Kind device) {
  const RingAttentionDims d = dims(y, lse, opt, device);
  expect_views({&sum}, device, "ring attention sum");
  TIDAL_ASSERT(sum.shape() == lse.shape(), "ring attention sum {} lse {}", sum.str(), lse.str());
  return d;
}

RingAttentionDims check_ring_backward(const Tensor& dq, const Tensor& dkv, const Tensor& q, const Tensor& kv,
                                      const Tensor& y, const Tensor& dy, const Tensor& lse, std::int64_t first_key,
                                      const RingAttentionOptions& opt, Device::Kind device) {
  const RingAttentionDims d = dims(q, lse, opt, device);
  expect_views({&dq, &dkv, &y, &dy}, device, "ring attention backward");
  for (const Tensor* t : {&dq, &y, &dy})
    TIDAL_ASSERT(t->shape() == q.shape(), "ring attention backward: {} for queries {}", t->str(), q.str());
  TIDAL_ASSERT(dkv.shape() == kv.shape(), "ring attention dkv {} kv {}", dkv.str(), kv.str());
  check_block(d, kv, first_key, opt, device);
  return d;
}

}  // namespace tidal::ops
