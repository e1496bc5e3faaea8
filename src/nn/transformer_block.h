// A transformer block: attention and MLP sublayers with residuals, pre-LN (GPT-2, ViT) or
// post-LN (original BERT), each sublayer output followed by dropout.
#pragma once

#include "nn/attention.h"
#include "nn/mlp.h"

namespace tidal::nn {

struct BlockConfig {
  std::int64_t n_embd = 0;
  int n_head = 1;
  bool causal = false;
  bool pre_ln = true;
  float ln_eps = 1e-5f;
  ops::GeluForm activation = ops::GeluForm::tanh;  // the MLP's
  float dropout = 0.0f;
  ParameterInit init = ParameterInit::normal(0.02f);
  ParameterInit proj_init = ParameterInit::normal(0.02f);  // output projections (GPT-2 scales these)
};

class TransformerBlock final : public Module {
 public:
  TransformerBlock(const BlockConfig& cfg, LayerFactory& layers);

  Tensor forward(const Tensor& x, Context& ctx) override;  // [B, T, C] -> [B, T, C]
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  bool pre_ln_;
  Module* ln_1_;
  MultiHeadSelfAttention* attn_;
  Module* attn_drop_;
  Module* ln_2_;
  Mlp* mlp_;
  Module* mlp_drop_;
};

}  // namespace tidal::nn
