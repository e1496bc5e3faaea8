// The Mixtral family's spec (model.type = "mixtral"): a Llama whose blocks have a mixture of
// SwiGLU experts in the MLP's place (Jiang et al. 2024, "Mixtral of Experts"; nn/moe.h), the top
// k weights renormalized; built and decoded as a Llama (models/llama/). Its mixture's keys are
// shared with Qwen2-MoE (models/qwen2_moe/).
#pragma once

#include "models/llama/family.h"
#include "models/registry.h"

namespace tidal::models {

// The keys of a Llama with a mixture of experts in every block (Mixtral reads some of them,
// Qwen2-MoE more).
struct MoeKeys : LlamaKeys {
  int experts = 8;
  int experts_per_token = 2;
  std::int64_t expert_intermediate_size = 0;         // each expert's width; 0 = the MLP's (intermediate_size)
  std::int64_t shared_expert_intermediate_size = 0;  // the shared expert's width; 0 = none
  bool norm_topk_prob = false;         // the k weights renormalized
  double router_aux_loss_coef = 0.001;  // the load-balancing loss's coefficient
  double router_z_loss_coef = 0.0;      // the router z-loss's coefficient
  double expert_capacity_factor = 0.0;  // > 0: an expert takes at most factor x its even share, the rest dropped
};
const KeyTable<MoeKeys>& moe_key_table();
MoeKeys moe_keys(const ModelConfig& m);
// Mixtral's keys of those.
const KeyTable<MoeKeys>& mixtral_key_table();

// The mixture of experts [model] gives, its top k weights renormalized or not.
nn::MoeConfig moe_config(const ModelConfig& m, bool normalize_top_k);
// Checks those keys.
void validate_moe(const ModelConfig& m);

Family mixtral_family();

}  // namespace tidal::models
