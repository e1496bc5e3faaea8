// Qwen2-MoE as Hugging Face writes it (Qwen2MoeForCausalLM, model_type "qwen2_moe", transformers
// 4.40): Qwen2's config.json and attention with the experts' keys, and each block's mlp: gate,
// experts.{e}.{gate, up, down}_proj, shared_expert.{gate, up, down}_proj and shared_expert_gate.
#pragma once

#include "models/hf_adapter.h"

namespace tidal::models {

HfAdapter qwen2_moe_hf_adapter();

}  // namespace tidal::models
