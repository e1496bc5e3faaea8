#include "nn/attention.h"

#include "ops/attention.h"

namespace tidal::nn {
namespace {
enum Slot : std::size_t { kQkv, kProj };

ops::AttentionOptions options(int n_head, bool causal, const Context& ctx) {
  const Batch* b = ctx.state().batch;
  const bool masked = b != nullptr && b->attn_mask.defined();
  return {.n_head = n_head, .causal = causal, .key_mask = masked ? &b->attn_mask : nullptr};
}
}  // namespace

MultiHeadSelfAttention::MultiHeadSelfAttention(std::int64_t n_embd, int n_head, bool causal, ParameterInit init,
                                               ParameterInit proj_init)
    : n_head_(n_head), causal_(causal),
      qkv_(&add_module("qkv", std::make_unique<Linear>(n_embd, 3 * n_embd, true, init))),
      proj_(&add_module("proj", std::make_unique<Linear>(n_embd, n_embd, true, proj_init))) {
  TIDAL_CHECK(n_head > 0 && n_embd % n_head == 0, "model.n_embd ({}) must be divisible by model.n_head ({})", n_embd,
              n_head);
}

Tensor MultiHeadSelfAttention::forward(const Tensor& x, Context& ctx) {
  Tensor qkv = ctx.forward(*qkv_, x, kQkv);  // [B, T, 3C]
  const std::int64_t B = x.dim(0), T = x.dim(1), C = x.dim(2);
  Tensor y = ctx.empty({B, T, C}, x.dtype());
  Tensor probs = ctx.empty({B, n_head_, T, T});
  ops::attention_forward(y, probs, qkv, options(n_head_, causal_, ctx));
  ctx.saved = {qkv, probs};
  return ctx.forward(*proj_, y, kProj);
}

Tensor MultiHeadSelfAttention::backward(const Tensor& dy, Context& ctx) {
  Tensor dattn = ctx.backward(*proj_, dy, kProj);
  const Tensor &qkv = ctx.saved.at(0), &probs = ctx.saved.at(1);
  Tensor dqkv = ctx.empty(qkv.shape(), qkv.dtype());
  ops::attention_backward(dqkv, dattn, qkv, probs, options(n_head_, causal_, ctx));
  ctx.saved.clear();
  return ctx.backward(*qkv_, dqkv, kQkv);
}

}  // namespace tidal::nn
