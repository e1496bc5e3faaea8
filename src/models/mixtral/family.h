// The Mixtral family's spec (model.type = "mixtral"): a Llama whose blocks have a mixture of
// SwiGLU experts in the MLP's place (Jiang et al. 2024, "Mixtral of Experts"; nn/moe.h), the top
// k weights renormalized; built and decoded as a Llama (models/llama/). Its mixture's keys are
// shared with Qwen2-MoE (models/qwen2_moe/).
#pragma once

#include "models/llama/family.h"
#include "models/registry.h"

namespace tidal::models {

// The mixture of experts [model] gives, its top k weights renormalized or not.
nn::MoeConfig moe_config(const ModelConfig& m, bool normalize_top_k);
// Checks those keys.
void validate_moe(const ModelConfig& m);

Family mixtral_family();

}  // namespace tidal::models
