// The [model] section of a run's config: the keys every family has, typed, and the values of the
// family's own (ModelConfig::family_keys), which the family declares in its folder and reads into
// its own options (models/family_keys.h). The schema (config/schema.cpp) shows them in one table.
#pragma once

#include "models/family_keys.h"

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
  double dropout = 0.0;
  double ln_eps = 0.0;  // 0 = the family's own (gpt 1e-5, bert 1e-12, vit 1e-6, llama 1e-6)
  // A Hugging Face model directory (config.json, model.safetensors) whose architecture fills the
  // keys above and the family's and whose weights are the start; "" = tidal's own init.
  std::string init_from;
  // The family's own keys a config gives (model.n_kv_head = 2 is family_keys["n_kv_head"]).
  KeyValues family_keys;
};

// The names of the keys above, which no family may declare as its own.
inline constexpr const char* kKeysOfEveryFamily[] = {"type",    "n_layer", "n_head", "n_embd",   "vocab_size",
                                                    "seq_len", "dropout", "ln_eps", "init_from"};

}  // namespace tidal::models
