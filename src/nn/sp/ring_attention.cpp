#include "nn/sp/ring_attention.h"

#include "nn/sp/ring_pass.h"
#include "ops/ring_attention.h"

namespace tidal::nn::sp {
namespace {

// Columns [begin, end) of qkv [B, T', (H + 2 Hkv) hd], contiguous, in fp32 (the ring's kernels
// are fp32: bf16 and fp16 are widened here, and the blocks travel the ring in fp32).
Tensor columns(const Tensor& qkv, std::int64_t begin, std::int64_t end, const Context& ctx) {
  Tensor out = ctx.empty({qkv.dim(0), qkv.dim(1), end - begin}, qkv.dtype());
  out.copy_from(qkv.slice(2, begin, end));
  return ctx.as(out, DType::f32);
}

}  // namespace

ops::RingAttentionOptions RingSelfAttention::options(const Context& ctx, std::int64_t Tq) const {
  const Batch* batch = ctx.state().batch;
  // The whole sequence's key mask: keys of every ring position meet this rank's queries.
  const Tensor* mask = batch != nullptr && batch->attn_mask.defined() ? &batch->attn_mask : nullptr;
  return {.n_head = n_head_, .n_kv_head = n_kv_head_, .causal = causal_, .first_query = ring_.rank() * Tq, .key_mask = mask};
}

Tensor RingSelfAttention::forward(const Tensor& qkv, Context& ctx) {
  const std::int64_t B = qkv.dim(0), Tq = qkv.dim(1), T = Tq * ring_.size();
  const ops::RingAttentionOptions opt = options(ctx, Tq);
  const std::int64_t hd = qkv.dim(2) / (n_head_ + 2 * n_kv_head_), C = n_head_ * hd, Ckv = n_kv_head_ * hd;
  TIDAL_ASSERT(qkv.dim(2) == C + 2 * Ckv, "ring attention: qkv {} for {} query and {} kv heads", qkv.str(), n_head_,
               n_kv_head_);
  Tensor q = columns(qkv, 0, C, ctx), k = columns(qkv, C, C + Ckv, ctx), v = columns(qkv, C + Ckv, C + 2 * Ckv, ctx);
  Tensor probs = ctx.empty({B, n_head_, Tq, T});
  RingPass ring(ring_);
  ring.pass(k, ctx, [&](const Tensor& block, int owner) { ops::attention_scores(probs, q, block, owner * Tq, opt); });
  ops::attention_softmax(probs, opt);
  Tensor y = ctx.empty(q.shape(), q.dtype());
  y.fill_(0.0f);
  ring.pass(v, ctx, [&](const Tensor& block, int owner) { ops::attention_values(y, probs, block, owner * Tq, opt); });
  ctx.saved = {q, k, v, probs};
  return ctx.as(y, qkv.dtype());
}

Tensor RingSelfAttention::backward(const Tensor& dy_given, Context& ctx) {
  const DType dtype = dy_given.dtype();
  const Tensor dy = ctx.as(dy_given, DType::f32);
  const Tensor &q = ctx.saved.at(0), &k = ctx.saved.at(1), &v = ctx.saved.at(2), &probs = ctx.saved.at(3);
  const std::int64_t Tq = q.dim(1);
  const ops::RingAttentionOptions opt = options(ctx, Tq);
  RingPass ring(ring_);
  Tensor dprobs = ctx.empty(probs.shape());
  const Tensor dv = ring.pass(
      v, ctx, [&](const Tensor& block, int owner) { ops::attention_probs_grad(dprobs, dy, block, owner * Tq, opt); },
      [&](const Tensor&, int owner, Tensor& acc) { ops::attention_values_grad(acc, probs, dy, owner * Tq, opt); });
  ops::attention_softmax_backward(dprobs, probs);
  Tensor dq = ctx.empty(q.shape(), q.dtype());
  dq.fill_(0.0f);
  const Tensor dk = ring.pass(
      k, ctx, [&](const Tensor& block, int owner) { ops::attention_query_grad(dq, dprobs, block, owner * Tq, opt); },
      [&](const Tensor&, int owner, Tensor& acc) { ops::attention_key_grad(acc, dprobs, q, owner * Tq, opt); });
  Tensor dqkv = ctx.empty({q.dim(0), Tq, q.dim(2) + 2 * k.dim(2)}, q.dtype());
  std::int64_t begin = 0;
  for (const Tensor* d : {static_cast<const Tensor*>(&dq), &dk, &dv}) {
    Tensor cols = dqkv.slice(2, begin, begin + d->dim(2));
    cols.copy_from(*d);
    begin += d->dim(2);
  }
  ctx.saved.clear();
  return ctx.as(dqkv, dtype);
}

}  // namespace tidal::nn::sp
