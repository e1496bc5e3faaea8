// The Llama family's spec (model.type = "llama"): the shape of Llama 2 / 3 and their kin
// (models/llama/llama.h), its keys, its decoder.
#pragma once

#include "models/family_keys.h"
#include "models/llama/llama.h"
#include "models/registry.h"

namespace tidal::models {

// Llama's own [model] keys (Qwen2's; Mixtral and Qwen2-MoE read some of them).
struct LlamaKeys {
  std::int64_t max_positions = 0;  // the context sampling may fill; 0 = model.seq_len
  bool tie_embeddings = false;     // Llama's LM head has a table of its own
  int n_kv_head = 0;               // grouped-query attention's key / value heads; 0 = n_head
  std::int64_t intermediate_size = 0;  // the SwiGLU width; 0 = Llama's 8C/3 rounded up to 256s
  double rope_theta = 10000.0;         // rotary embeddings' frequency base
  double rope_scaling_factor = 0.0;    // Llama 3 frequency scaling; 0 = none
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  std::int64_t rope_original_max_positions = 8192;
  bool attention_bias = false;  // biases on the attention's projections
};
const KeyTable<LlamaKeys>& llama_key_table();
LlamaKeys llama_keys(const ModelConfig& m);

// model.intermediate_size, or when 0 Llama's: 2/3 of 4 n_embd rounded up to a multiple of 256
// (the width Llama's reference code gives a SwiGLU MLP).
std::int64_t llama_intermediate_size(const ModelConfig& m);

// The positions a Llama-shaped model attends over (its decoder's context, config.json's
// max_position_embeddings): model.max_positions, else model.seq_len.
std::int64_t llama_context(const ModelConfig& m);

// The Llama options [model] gives.
LlamaConfig llama_config(const ModelConfig& cfg, const nn::CheckpointPolicy& checkpointing = {},
                         bool embedding_on_host = false);
// What a Llama-shaped model's keys tell the engine: its key / value heads, context and head.
ModelTraits llama_traits(const ModelConfig& m);

Family llama_family();

}  // namespace tidal::models
