#include "nn/attention.h"

#include "ops/attention.h"

namespace tidal::nn {
namespace {
enum AttentionSlot : std::size_t { kQkv, kAttention, kOutProj, kRotary };

// The key mask and document positions of this rank's samples (views of the batch's), undefined
// where the batch has none.
struct Masks {
  Tensor key_mask, doc_positions;
};
Masks masks(const BatchSlice& samples, const Context& ctx) {
  const Batch* b = ctx.state().batch;
  if (b == nullptr) return {};
  return {b->attn_mask.defined() ? samples.of(b->attn_mask) : Tensor{},
          b->positions.defined() ? samples.of(b->positions) : Tensor{}};
}

ops::AttentionOptions options(int n_head, int n_kv_head, bool causal, const Masks& m, const Context& ctx) {
  return {.n_head = n_head,
          .n_kv_head = n_kv_head,
          .causal = causal,
          .key_mask = m.key_mask.defined() ? &m.key_mask : nullptr,
          .doc_positions = m.doc_positions.defined() ? &m.doc_positions : nullptr,
          .kernels = ctx.state().attention};
}
}  // namespace

Tensor ScaledDotProductAttention::forward(const Tensor& qkv, Context& ctx) {
  const std::int64_t B = qkv.dim(0), T = qkv.dim(1), hd = qkv.dim(2) / (n_head_ + 2 * n_kv_head_);
  Tensor y = ctx.empty({B, T, n_head_ * hd}, qkv.dtype());
  Tensor lse = ctx.empty({B, n_head_, T});
  ops::attention_forward(y, lse, qkv, options(n_head_, n_kv_head_, causal_, masks(samples_, ctx), ctx));
  ctx.saved = {qkv, y, lse};  // y is the projection's input, which keeps it anyway
  return y;
}

Tensor ScaledDotProductAttention::backward(const Tensor& dy, Context& ctx) {
  const Tensor &qkv = ctx.saved.at(0), &y = ctx.saved.at(1), &lse = ctx.saved.at(2);
  Tensor dqkv = ctx.empty(qkv.shape(), qkv.dtype());
  ops::attention_backward(dqkv, dy, qkv, y, lse, options(n_head_, n_kv_head_, causal_, masks(samples_, ctx), ctx));
  ctx.saved.clear();
  return dqkv;
}

MultiHeadSelfAttention::MultiHeadSelfAttention(std::int64_t n_embd, const AttentionConfig& c, ParameterInit init,
                                               ParameterInit proj_init, LayerFactory& layers)
    : recompute_qkv_(c.recompute_qkv) {
  const int H = c.n_head, Hkv = c.n_kv_head ? c.n_kv_head : c.n_head, parts = layers.feature_parts();
  TIDAL_CHECK(H > 0 && n_embd % H == 0, "model.n_embd ({}) must be divisible by model.n_head ({})", n_embd, H);
  TIDAL_CHECK(Hkv > 0 && H % Hkv == 0, "model.n_head ({}) must be a multiple of model.n_kv_head ({}): each key / "
              "value head serves an equal group of query heads", H, Hkv);
  TIDAL_CHECK(Hkv % parts == 0,
              "model.{} ({}) must be divisible by the {} ways the tensor-parallel layout splits heads{}",
              Hkv == H ? "n_head" : "n_kv_head", Hkv, parts,
              Hkv == H ? "" : ": each rank holds whole groups of query heads with their key / value head");
  const std::int64_t hd = n_embd / H;
  // g = H / Hkv query segments, then k and v: g + 2 segments of Hkv heads.
  qkv_ = &add_module("qkv", layers.input_linear(n_embd, (H + 2 * Hkv) * hd, c.bias, init, H / Hkv + 2));
  if (c.rotary.theta > 0)
    rotary_ = &add_module("rotary", layers.rotary(H / parts, Hkv / parts, hd, c.rotary));
  attention_ = &add_module("attention", layers.self_attention(H / parts, Hkv / parts, c.causal));
  proj_ = &add_module("proj", layers.output_linear(n_embd, n_embd, c.proj_bias, proj_init));
}

Tensor MultiHeadSelfAttention::qkv(const Tensor& x, Context& ctx) {
  Tensor qkv = ctx.forward(*qkv_, x, kQkv);  // [B, T, (H + 2 Hkv) hd] (this rank's heads)
  if (rotary_) qkv = ctx.forward(*rotary_, qkv, kRotary);
  return qkv;
}

Tensor MultiHeadSelfAttention::forward(const Tensor& x, Context& ctx) {
  const Tensor qkv = this->qkv(x, ctx);
  Tensor y = ctx.forward(*proj_, ctx.forward(*attention_, qkv, kAttention), kOutProj);
  // The qkv projection keeps x for its backward anyway: holding it here too costs nothing.
  if (recompute_qkv_ && ctx.forget(qkv) > 0) ctx.saved = {x};
  return y;
}

Tensor MultiHeadSelfAttention::backward(const Tensor& dy, Context& ctx) {
  if (!ctx.saved.empty()) {  // remade through the runner, as activation checkpointing remakes a block
    ctx.remember(qkv(ctx.saved.at(0), ctx));
    ctx.saved.clear();
  }
  Tensor dqkv = ctx.backward(*attention_, ctx.backward(*proj_, dy, kOutProj), kAttention);
  if (rotary_) dqkv = ctx.backward(*rotary_, dqkv, kRotary);
  return ctx.backward(*qkv_, dqkv, kQkv);
}

}  // namespace tidal::nn
