// The GPT family's spec (model.type = "gpt"): GPT-2's shape (models/gpt/gpt.h), its keys, its
// decoder.
#pragma once

#include "models/family_keys.h"
#include "models/gpt/gpt.h"
#include "models/registry.h"

namespace tidal::models {

// GPT's own [model] keys (BERT's too, models/bert/).
struct GptKeys {
  std::int64_t max_positions = 0;  // learned positions; 0 = model.seq_len
  ops::GeluForm activation = ops::GeluForm::tanh;
  bool tie_embeddings = true;
};
const KeyTable<GptKeys>& gpt_key_table();
GptKeys gpt_keys(const ModelConfig& m);

// The GPT options [model] gives: what the family builds, and what its decoder runs.
GptConfig gpt_config(const ModelConfig& cfg, const nn::CheckpointPolicy& checkpointing = {},
                     bool embedding_on_host = false);

Family gpt_family();

}  // namespace tidal::models
