// The [model] section of a run's config: the keys every family shares and each family's own
// (the schema, config/schema.cpp, shows them in one table), typed. A family's spec
// (models/registry.h) turns them into its model's own options and checks its keys.
#pragma once

#include "ops/gelu_form.h"

#include <cstdint>
#include <string>

namespace tidal::models {

// What a model learns, which picks the data it trains on.
enum class ModelTask {
  causal_lm,             // next-token prediction on token data (markov, tokens, text)
  masked_lm,             // masked tokens
  image_classification,  // labelled images
};

struct ModelConfig {
  std::string type = "gpt";  // a registered family (models/registry.h)
  int n_layer = 2;
  int n_head = 2;
  std::int64_t n_embd = 64;
  std::int64_t vocab_size = 128;
  std::int64_t seq_len = 64;
  std::int64_t max_positions = 0;  // gpt, bert: learned positions; 0 = seq_len
  double dropout = 0.0;
  bool tie_embeddings = true;  // gpt, bert: the LM head reads the token table (false: a table of its own)
  ops::GeluForm activation = ops::GeluForm::tanh;  // gelu_tanh | gelu_erf: the MLP's GELU
  double ln_eps = 0.0;                   // 0 = the model's own (gpt 1e-5, bert 1e-12, vit 1e-6)
  std::int64_t type_vocab_size = 2;      // bert: token types
  // llama
  int n_kv_head = 0;                     // grouped-query attention's key / value heads; 0 = n_head
  std::int64_t intermediate_size = 0;    // the SwiGLU width; 0 = Llama's 8C/3 rounded up to 256s
  double rope_theta = 10000.0;           // rotary embeddings' frequency base
  double rope_scaling_factor = 0.0;      // Llama 3 frequency scaling; 0 = none
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  std::int64_t rope_original_max_positions = 8192;
  bool attention_bias = false;           // biases on the attention's projections
  // mixtral, qwen2_moe: a mixture of SwiGLU experts in every block's MLP place (nn/moe.h)
  int experts = 8;
  int experts_per_token = 2;
  std::int64_t expert_intermediate_size = 0;         // each expert's width; 0 = the MLP's (intermediate_size)
  std::int64_t shared_expert_intermediate_size = 0;  // qwen2_moe: the shared expert's width; 0 = none
  bool norm_topk_prob = false;           // qwen2_moe: the k weights renormalized (Mixtral always does)
  double router_aux_loss_coef = 0.001;   // the load-balancing loss's coefficient
  double router_z_loss_coef = 0.0;       // the router z-loss's coefficient
  double expert_capacity_factor = 0.0;   // > 0: an expert takes at most factor x its even share, the rest dropped
  // A Hugging Face model directory (config.json, model.safetensors) whose architecture fills the
  // keys above and whose weights are the start; "" = tidal's own init.
  std::string init_from;
  // vit
  std::int64_t image_size = 32;
  std::int64_t patch_size = 8;
  std::int64_t channels = 3;
  std::int64_t num_classes = 10;
};

}  // namespace tidal::models
