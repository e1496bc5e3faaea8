// The Qwen2 family's spec (model.type = "qwen2"): Qwen2ForCausalLM, a Llama with biases on the
// attention's q, k and v (not on its output), built and decoded as one (models/llama/).
#pragma once

#include "models/llama/family.h"
#include "models/registry.h"

namespace tidal::models {

Family qwen2_family();

}  // namespace tidal::models
