// A transformer block: attention and MLP sublayers with residuals, each sublayer output followed
// by dropout, its norms before the sublayers (pre-norm: GPT-2, ViT, Llama) or after the residual
// sums (post-norm: original BERT). The model chooses the parts: LayerNorm or RMSNorm, attention
// with learned or rotary positions and grouped-query heads, a GELU or SwiGLU MLP or a mixture of
// SwiGLU experts; the factory
// makes each for the parallel layout.
#pragma once

#include "nn/attention.h"
#include "nn/mlp.h"
#include "nn/moe.h"

namespace tidal::nn {

enum class NormKind { layer_norm, rms_norm };

struct BlockConfig {
  std::int64_t n_embd = 0;
  AttentionConfig attention{};
  MlpConfig mlp{};
  MoeConfig moe{};  // moe.experts > 0: a mixture of experts in the MLP's place (its `mlp` unused)
  NormKind norm = NormKind::layer_norm;
  float norm_eps = 1e-5f;
  bool pre_norm = true;
  float dropout = 0.0f;
  ParameterInit init = ParameterInit::normal(0.02f);
  ParameterInit proj_init = ParameterInit::normal(0.02f);  // output projections (GPT-2 scales these)
};

// A norm of `kind` over `features`, made by `layers`.
std::unique_ptr<Module> make_norm(LayerFactory& layers, NormKind kind, std::int64_t features, float eps);

class TransformerBlock final : public Module {
 public:
  TransformerBlock(const BlockConfig& cfg, LayerFactory& layers);

  Tensor forward(const Tensor& x, Context& ctx) override;  // [B, T, C] -> [B, T, C]
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  bool pre_norm_;
  Module* ln_1_;
  MultiHeadSelfAttention* attn_;
  Module* attn_drop_;
  Module* ln_2_;
  Module* mlp_;  // an Mlp or a MixtureOfExperts
  Module* mlp_drop_;
};

}  // namespace tidal::nn
