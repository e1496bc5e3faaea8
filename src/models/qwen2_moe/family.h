// The Qwen2-MoE family's spec (model.type = "qwen2_moe"): Qwen2 (biases on q, k and v) whose
// blocks have a mixture of SwiGLU experts in the MLP's place, with a shared expert every token
// passes through behind a sigmoid gate, and the top k weights renormalized only if
// model.norm_topk_prob; built and decoded as a Llama (models/llama/, models/mixtral/).
#pragma once

#include "models/mixtral/family.h"

namespace tidal::models {

// Qwen2-MoE's keys: Mixtral's, the experts' width, the shared expert's and norm_topk_prob.
const KeyTable<MoeKeys>& qwen2_moe_key_table();

Family qwen2_moe_family();

}  // namespace tidal::models
