#include "nn/transformer_block.h"

#include "ops/residual.h"

namespace tidal::nn {
namespace {
enum BlockSlot : std::size_t { kLn1, kAttn, kAttnDrop, kLn2, kMlp, kMlpDrop };

Tensor add(const Tensor& a, const Tensor& b, Context& ctx) {
  Tensor y = ctx.empty(a.shape(), a.dtype());
  ops::residual_add(y, a, b);
  return y;
}
}  // namespace

std::unique_ptr<Module> make_norm(LayerFactory& layers, NormKind kind, std::int64_t features, float eps) {
  return kind == NormKind::rms_norm ? layers.rms_norm(features, eps) : layers.layer_norm(features, eps);
}

TransformerBlock::TransformerBlock(const BlockConfig& c, LayerFactory& layers)
    : pre_norm_(c.pre_norm),
      ln_1_(&add_module("ln_1", make_norm(layers, c.norm, c.n_embd, c.norm_eps))),
      attn_(&add_module("attn", std::make_unique<MultiHeadSelfAttention>(c.n_embd, c.attention, c.init, c.proj_init,
                                                                         layers))),
      attn_drop_(&add_module("attn_drop", layers.dropout(c.dropout))),
      ln_2_(&add_module("ln_2", make_norm(layers, c.norm, c.n_embd, c.norm_eps))),
      mlp_(&add_module("mlp", c.moe.experts > 0
                                  ? layers.mixture_of_experts(c.n_embd, c.moe, c.init, c.proj_init)
                                  : std::unique_ptr<Module>(std::make_unique<Mlp>(c.n_embd, c.mlp, c.init, c.proj_init, layers)))),
      mlp_drop_(&add_module("mlp_drop", layers.dropout(c.dropout))) {}

Tensor TransformerBlock::forward(const Tensor& x, Context& ctx) {
  if (pre_norm_) {
    // h = x + drop(attn(ln_1(x))); y = h + drop(mlp(ln_2(h)))
    Tensor a = ctx.forward(*attn_drop_, ctx.forward(*attn_, ctx.forward(*ln_1_, x, kLn1), kAttn), kAttnDrop);
    Tensor h = add(x, a, ctx);
    Tensor m = ctx.forward(*mlp_drop_, ctx.forward(*mlp_, ctx.forward(*ln_2_, h, kLn2), kMlp), kMlpDrop);
    return add(h, m, ctx);
  }
  // h = ln_1(x + drop(attn(x))); y = ln_2(h + drop(mlp(h)))
  Tensor a = ctx.forward(*attn_drop_, ctx.forward(*attn_, x, kAttn), kAttnDrop);
  Tensor h = ctx.forward(*ln_1_, add(x, a, ctx), kLn1);
  Tensor m = ctx.forward(*mlp_drop_, ctx.forward(*mlp_, h, kMlp), kMlpDrop);
  return ctx.forward(*ln_2_, add(h, m, ctx), kLn2);
}

Tensor TransformerBlock::backward(const Tensor& dy, Context& ctx) {
  if (pre_norm_) {
    Tensor dm = ctx.backward(*ln_2_, ctx.backward(*mlp_, ctx.backward(*mlp_drop_, dy, kMlpDrop), kMlp), kLn2);
    Tensor dh = add(dy, dm, ctx);
    Tensor da = ctx.backward(*ln_1_, ctx.backward(*attn_, ctx.backward(*attn_drop_, dh, kAttnDrop), kAttn), kLn1);
    return add(dh, da, ctx);
  }
  Tensor ds2 = ctx.backward(*ln_2_, dy, kLn2);  // gradient of h + drop(mlp(h))
  Tensor dh = add(ds2, ctx.backward(*mlp_, ctx.backward(*mlp_drop_, ds2, kMlpDrop), kMlp), ctx);
  Tensor ds1 = ctx.backward(*ln_1_, dh, kLn1);  // gradient of x + drop(attn(x))
  return add(ds1, ctx.backward(*attn_, ctx.backward(*attn_drop_, ds1, kAttnDrop), kAttn), ctx);
}

}  // namespace tidal::nn
