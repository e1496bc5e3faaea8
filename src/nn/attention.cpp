#include "nn/attention.h"

#include "ops/attention.h"

namespace tidal::nn {
namespace {
enum Slot : std::size_t { kQkv, kAttention, kProj };

// The key mask of this rank's samples (a view of the batch's), undefined without one.
Tensor key_mask(const BatchSlice& samples, const Context& ctx) {
  const Batch* b = ctx.state().batch;
  return b != nullptr && b->attn_mask.defined() ? samples.of(b->attn_mask) : Tensor{};
}

ops::AttentionOptions options(int n_head, bool causal, const Tensor& mask) {
  return {.n_head = n_head, .causal = causal, .key_mask = mask.defined() ? &mask : nullptr};
}
}  // namespace

Tensor ScaledDotProductAttention::forward(const Tensor& qkv, Context& ctx) {
  const std::int64_t B = qkv.dim(0), T = qkv.dim(1), C = qkv.dim(2) / 3;
  Tensor y = ctx.empty({B, T, C}, qkv.dtype());
  Tensor lse = ctx.empty({B, n_head_, T});
  ops::attention_forward(y, lse, qkv, options(n_head_, causal_, key_mask(samples_, ctx)));
  ctx.saved = {qkv, y, lse};  // y is the projection's input, which keeps it anyway
  return y;
}

Tensor ScaledDotProductAttention::backward(const Tensor& dy, Context& ctx) {
  const Tensor &qkv = ctx.saved.at(0), &y = ctx.saved.at(1), &lse = ctx.saved.at(2);
  Tensor dqkv = ctx.empty(qkv.shape(), qkv.dtype());
  ops::attention_backward(dqkv, dy, qkv, y, lse, options(n_head_, causal_, key_mask(samples_, ctx)));
  ctx.saved.clear();
  return dqkv;
}

MultiHeadSelfAttention::MultiHeadSelfAttention(std::int64_t n_embd, int n_head, bool causal, ParameterInit init,
                                               ParameterInit proj_init, LayerFactory& layers) {
  TIDAL_CHECK(n_head > 0 && n_embd % n_head == 0, "model.n_embd ({}) must be divisible by model.n_head ({})", n_embd,
              n_head);
  TIDAL_CHECK(n_head % layers.feature_parts() == 0,
              "model.n_head ({}) must be divisible by the {} ways the tensor-parallel layout splits heads", n_head,
              layers.feature_parts());
  qkv_ = &add_module("qkv", layers.input_linear(n_embd, 3 * n_embd, true, init, 3));
  attention_ = &add_module("attention", layers.self_attention(n_head / layers.feature_parts(), causal));
  proj_ = &add_module("proj", layers.output_linear(n_embd, n_embd, true, proj_init));
}

Tensor MultiHeadSelfAttention::forward(const Tensor& x, Context& ctx) {
  Tensor qkv = ctx.forward(*qkv_, x, kQkv);  // [B, T, 3C] (this rank's heads)
  return ctx.forward(*proj_, ctx.forward(*attention_, qkv, kAttention), kProj);
}

Tensor MultiHeadSelfAttention::backward(const Tensor& dy, Context& ctx) {
  Tensor dqkv = ctx.backward(*attention_, ctx.backward(*proj_, dy, kProj), kAttention);
  return ctx.backward(*qkv_, dqkv, kQkv);
}

}  // namespace tidal::nn
