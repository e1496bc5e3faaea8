// The GPT family's spec (model.type = "gpt"): GPT-2's shape (models/gpt/gpt.h), its decoder.
#pragma once

#include "models/gpt/gpt.h"
#include "models/registry.h"

namespace tidal::models {

// The GPT options [model] gives: what the family builds, and what its decoder runs.
GptConfig gpt_config(const ModelConfig& cfg, const nn::CheckpointPolicy& checkpointing = {},
                     bool embedding_on_host = false);

Family gpt_family();

}  // namespace tidal::models
