// GPT-2: learned positions, pre-LN blocks with causal attention, tanh GELU, final LayerNorm,
// LM head tied to the token embedding (or, untied, a table of its own: lm_head.weight). Parameter names follow GPT-2 (wte, wpe, ln_f) with
// blocks.{i}.{ln_1, attn.qkv, attn.proj, ln_2, mlp.fc, mlp.proj}.
#pragma once

#include "models/model.h"
#include "nn/layer_factory.h"
#include "ops/gelu.h"

namespace tidal::models {

struct GptConfig {
  int n_layer = 6;
  int n_head = 6;
  std::int64_t n_embd = 384;
  std::int64_t vocab_size = 512;
  std::int64_t seq_len = 256;  // learned positions
  std::int64_t max_positions = 0;  // the position table's rows; 0 = seq_len
  float dropout = 0.0f;        // embedding and residual dropout
  float ln_eps = 1e-5f;
  ops::GeluForm activation = ops::GeluForm::tanh;  // the MLP's GELU (HF: gelu_new = tanh, gelu = erf)
  float init_std = 0.02f;
  nn::CheckpointPolicy checkpointing{};  // activation checkpointing of the blocks
  bool tie_embeddings = true;            // false: the LM head has a table of its own
  bool embedding_on_host = false;        // the embedding layer runs on the host CPU (nn/on_host.h)
};

std::unique_ptr<Model> make_gpt(const GptConfig& cfg, nn::LayerFactory& layers = nn::single_device_layers());

}  // namespace tidal::models
