// The decoder of a Llama (models/llama/llama.h): RMSNorm, attention with rotary positions and grouped
// key / value heads (the cache holds only the n_kv_head heads), a SwiGLU MLP or a mixture of SwiGLU
// experts (routed as in training, nn/router.h), ln_f and the head, one position at a time
// (models/decoder.h).
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
    // A mixture of experts in the MLP's place (fc_w and down_w undefined):
    Tensor router_w{};                  // [E, C]
    std::vector<Tensor> expert_fc{};    // [2Ie, C] each: gate | up
    std::vector<Tensor> expert_down{};  // [C, Ie] each
    Tensor shared_fc{}, shared_down{};  // the shared expert's ([2Is, C], [C, Is]), or undefined
    Tensor shared_gate_w{};             // [1, C], or undefined
    Tensor k_cache;  // [P, Hkv hd]: the keys of positions [0, positions()), rotated
    Tensor v_cache;  // [P, Hkv hd]: their values
  };
  void step(std::int32_t token, std::int64_t t) override;
  // o_ = the mixture of experts of block b on a_.
  void mixture(const Block& b);
  // out = a SwiGLU MLP (fc [2I, C], down [C, I]) on a_, through gate_up [1, 2I] and h [1, I].
  void swiglu_mlp(Tensor& out, const Tensor& fc, const Tensor& down, Tensor& gate_up, Tensor& h);

  std::int64_t C_, V_, P_, I_, hd_;
  int n_head_, n_kv_head_;
  float eps_;
  std::vector<float> inv_freq_;  // [hd/2]
  Tensor wte_;   // [V, C]
  Tensor head_;  // [V, C]: lm_head.weight, or wte (tied)
  Tensor ln_f_w_;  // [C]
  nn::MoeConfig moe_;
  std::vector<Block> blocks_;
  // One position's activations.
  Tensor x_;        // [1, C]: the residual stream
  Tensor a_;        // [1, C]: a norm's output
  Tensor qkv_;      // [1, 1, (H + 2 Hkv) hd]
  Tensor y_;        // [1, H hd]: attention's output
  Tensor o_;        // [1, C]: a sublayer's output projection
  Tensor gate_up_;  // [1, 2I]
  Tensor h_;        // [1, I]: SwiGLU's output
  Tensor router_;   // [1, E]: a mixture's router logits
  Tensor expert_gate_up_, expert_h_, shared_gate_up_, shared_h_;  // [1, 2I] and [1, I] of an expert, the shared one
  Tensor expert_o_;  // [1, C]: an expert's output
  Tensor rstd_;     // [1]: RMSNorm's statistic (an output inference does not read)
  Tensor cos_, sin_;  // [1, hd/2]: the rotation of the position being fed
  Tensor logits_;   // [1, V]
  std::vector<float> scores_;  // [P]: one head's attention weights
  bool logits_ready_ = false;
};

}  // namespace tidal::models
