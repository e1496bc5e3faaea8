// Multi-head self-attention: fused qkv projection, scaled dot-product attention (causal for
// GPT, key padding mask from the batch for BERT), output projection.
#pragma once

#include "nn/linear.h"
#include "nn/module.h"

namespace tidal::nn {

class MultiHeadSelfAttention final : public Module {
 public:
  MultiHeadSelfAttention(std::int64_t n_embd, int n_head, bool causal, ParameterInit init, ParameterInit proj_init);

  Tensor forward(const Tensor& x, Context& ctx) override;  // [B, T, C] -> [B, T, C]
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  int n_head_;
  bool causal_;
  Linear* qkv_;   // weight [3C, C]: rows q | k | v
  Linear* proj_;  // weight [C, C]
};

}  // namespace tidal::nn
