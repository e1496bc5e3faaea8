// Multi-head self-attention: fused qkv projection, scaled dot-product attention (causal for
// GPT, key padding mask from the batch for BERT), output projection. The three parts come from
// a LayerFactory: under tensor parallelism qkv is an input_linear whose q, k and v are split by
// heads (each rank attends with its n_head / feature_parts heads) and proj an output_linear;
// under sequence parallelism the attention itself is the ring's (nn/sp/ring_attention.h).
#pragma once

#include "nn/layer_factory.h"

namespace tidal::nn {

// Scaled dot-product attention of the heads and samples a rank holds whole: qkv [B', T, 3C'] ->
// y [B', T, C'], flash-style: it keeps qkv, y and each query's log-sum-exp [B', H', T] for
// backward, never the probabilities. The key mask is the batch's, for the `samples`.
class ScaledDotProductAttention final : public Module {
 public:
  ScaledDotProductAttention(int n_head, bool causal, BatchSlice samples)
      : n_head_(n_head), causal_(causal), samples_(samples) {}

  Tensor forward(const Tensor& qkv, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  int n_head_;
  bool causal_;
  BatchSlice samples_;
};

class MultiHeadSelfAttention final : public Module {
 public:
  MultiHeadSelfAttention(std::int64_t n_embd, int n_head, bool causal, ParameterInit init, ParameterInit proj_init,
                         LayerFactory& layers);

  Tensor forward(const Tensor& x, Context& ctx) override;  // [B, T, C] -> [B, T, C]
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  Module* qkv_;        // weight [3C, C]: rows q | k | v
  Module* attention_;  // this rank's heads
  Module* proj_;       // weight [C, C]
};

}  // namespace tidal::nn
