// Qwen2 as Hugging Face writes it (Qwen2ForCausalLM, model_type "qwen2", transformers 4.40): a
// Llama-shaped config.json with Qwen2's defaults and sliding-window keys, and Llama's weight
// names with q, k and v biases.
#pragma once

#include "models/hf_adapter.h"

namespace tidal::models {

HfAdapter qwen2_hf_adapter();

}  // namespace tidal::models
