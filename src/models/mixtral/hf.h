// Mixtral as Hugging Face writes it (MixtralForCausalLM, model_type "mixtral", transformers 4.40):
// a Llama-shaped config.json with the experts' keys, and each block's block_sparse_moe: gate, and
// experts.{e}.w1 | w3 (tidal's fused fc) and w2 (its proj).
#pragma once

#include "models/hf_adapter.h"

namespace tidal::models {

HfAdapter mixtral_hf_adapter();

}  // namespace tidal::models
