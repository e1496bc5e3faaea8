// The Llama family's spec (model.type = "llama"): the shape of Llama 2 / 3 and their kin
// (models/llama/llama.h), its decoder.
#pragma once

#include "models/llama/llama.h"
#include "models/registry.h"

namespace tidal::models {

// model.intermediate_size, or when 0 Llama's: 2/3 of 4 n_embd rounded up to a multiple of 256
// (the width Llama's reference code gives a SwiGLU MLP).
std::int64_t llama_intermediate_size(const ModelConfig& m);

// The Llama options [model] gives.
LlamaConfig llama_config(const ModelConfig& cfg, const nn::CheckpointPolicy& checkpointing = {},
                         bool embedding_on_host = false);

Family llama_family();

}  // namespace tidal::models
