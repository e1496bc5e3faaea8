// The decoder of a GPT (models/gpt/gpt.h): learned positions, pre-LN blocks with causal attention and
// the model's GELU, ln_f, the tied or untied head, one position at a time (models/decoder.h).
// A sequence never goes past the model's learned positions (wpe's rows).
#pragma once

#include "models/decoder.h"
#include "models/gpt/gpt.h"

#include <vector>

namespace tidal::models {

class GptDecoder final : public Decoder {
 public:
  GptDecoder(Model& model, const GptConfig& cfg);

  std::int64_t vocab_size() const override { return V_; }
  std::int64_t max_positions() const override { return P_; }
  Tensor logits() override;

 private:
  struct Block {
    Tensor ln_1_w, ln_1_b;  // [C]
    Tensor qkv_w;           // [3C, C]: rows q | k | v, heads contiguous in each
    Tensor qkv_b;           // [3C]
    Tensor proj_w;          // [C, C]
    Tensor proj_b;          // [C]
    Tensor ln_2_w, ln_2_b;  // [C]
    Tensor fc_w;            // [4C, C]
    Tensor fc_b;            // [4C]
    Tensor mlp_proj_w;      // [C, 4C]
    Tensor mlp_proj_b;      // [C]
    Tensor k_cache;         // [P, C]: the keys of positions [0, positions())
    Tensor v_cache;         // [P, C]: their values
  };
  void step(std::int32_t token, std::int64_t t) override;

  std::int64_t C_, V_, P_;
  int n_head_;
  float ln_eps_;
  ops::GeluForm activation_;
  Tensor wte_;   // [V, C]
  Tensor wpe_;   // [P, C]
  Tensor head_;  // [V, C]: wte (tied) or lm_head.weight
  Tensor ln_f_w_, ln_f_b_;  // [C]
  std::vector<Block> blocks_;
  // One position's activations.
  Tensor x_;       // [1, C]: the residual stream
  Tensor a_;       // [1, C]: a LayerNorm's output
  Tensor qkv_;     // [1, 3C]
  Tensor y_;       // [1, C]: attention's output
  Tensor o_;       // [1, C]: a sublayer's output projection
  Tensor fc_;      // [1, 4C]
  Tensor gelu_;    // [1, 4C]
  Tensor mean_, rstd_;  // [1]: LayerNorm's statistics (outputs of the op that inference does not read)
  Tensor logits_;  // [1, V]
  std::vector<float> scores_;  // [P]: one head's attention weights
  bool logits_ready_ = false;  // logits_ belong to the last position fed
};

}  // namespace tidal::models
