// The decoder of a Llama (models/llama/llama.h): RMSNorm, attention with rotary positions and grouped
// key / value heads (the cache holds only the n_kv_head heads), a SwiGLU MLP, ln_f and the head,
// one position at a time (models/decoder.h).
#pragma once

#include "models/decoder.h"
#include "models/llama/llama.h"

#include <vector>

namespace tidal::models {

class LlamaDecoder final : public Decoder {
 public:
  // `max_positions`: the longest sequence to allow (the model's context).
  LlamaDecoder(Model& model, const LlamaConfig& cfg, std::int64_t max_positions);

  std::int64_t vocab_size() const override { return V_; }
  std::int64_t max_positions() const override { return P_; }
  Tensor logits() override;

 private:
  struct Block {
    Tensor ln_1_w;   // [C]
    Tensor qkv_w;    // [(H + 2 Hkv) hd, C]: query heads (tidal's order), then k, then v
    Tensor qkv_b;    // [(H + 2 Hkv) hd], or undefined
    Tensor proj_w;   // [C, C]
    Tensor proj_b;   // [C], or undefined
    Tensor ln_2_w;   // [C]
    Tensor fc_w;     // [2I, C]: gate | up
    Tensor down_w;   // [C, I]
    Tensor k_cache;  // [P, Hkv hd]: the keys of positions [0, positions()), rotated
    Tensor v_cache;  // [P, Hkv hd]: their values
  };
  void step(std::int32_t token, std::int64_t t) override;

  std::int64_t C_, V_, P_, I_, hd_;
  int n_head_, n_kv_head_;
  float eps_;
  std::vector<float> inv_freq_;  // [hd/2]
  Tensor wte_;   // [V, C]
  Tensor head_;  // [V, C]: lm_head.weight, or wte (tied)
  Tensor ln_f_w_;  // [C]
  std::vector<Block> blocks_;
  // One position's activations.
  Tensor x_;        // [1, C]: the residual stream
  Tensor a_;        // [1, C]: a norm's output
  Tensor qkv_;      // [1, 1, (H + 2 Hkv) hd]
  Tensor y_;        // [1, H hd]: attention's output
  Tensor o_;        // [1, C]: a sublayer's output projection
  Tensor gate_up_;  // [1, 2I]
  Tensor h_;        // [1, I]: SwiGLU's output
  Tensor rstd_;     // [1]: RMSNorm's statistic (an output inference does not read)
  Tensor cos_, sin_;  // [1, hd/2]: the rotation of the position being fed
  Tensor logits_;   // [1, V]
  std::vector<float> scores_;  // [P]: one head's attention weights
  bool logits_ready_ = false;
};

}  // namespace tidal::models
