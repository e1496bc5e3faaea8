// Multi-head self-attention: fused qkv projection, scaled dot-product attention (causal for
// GPT, key padding mask from the batch for BERT), output projection. The projections come from
// a LayerFactory: under tensor parallelism qkv is an input_linear whose q, k and v are split by
// heads (each rank attends with its n_head / feature_parts heads) and proj an output_linear.
#pragma once

#include "nn/layer_factory.h"

namespace tidal::nn {

class MultiHeadSelfAttention final : public Module {
 public:
  MultiHeadSelfAttention(std::int64_t n_embd, int n_head, bool causal, ParameterInit init, ParameterInit proj_init,
                         LayerFactory& layers);

  Tensor forward(const Tensor& x, Context& ctx) override;  // [B, T, C] -> [B, T, C]
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  int n_head_;  // on this rank
  bool causal_;
  BatchSlice samples_;
  Module* qkv_;   // weight [3C, C]: rows q | k | v
  Module* proj_;  // weight [C, C]
};

}  // namespace tidal::nn
