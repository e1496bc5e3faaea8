#include "models/mixtral/family.h"

#include "models/llama/decoder.h"
#include "models/mixtral/hf.h"

namespace tidal::models {
namespace {

LlamaConfig mixtral_config(const ModelConfig& c, const nn::CheckpointPolicy& checkpointing = {},
                           bool embedding_on_host = false) {
  LlamaConfig l = llama_config(c, checkpointing, embedding_on_host);
  l.moe = moe_config(c, true);
  return l;
}

}  // namespace

const KeyTable<MoeKeys>& moe_key_table() {
  static const KeyTable<MoeKeys> table =
      KeyTable<MoeKeys>()
          .add_all(llama_key_table())
          .add("experts", &MoeKeys::experts, "experts in each block's mixture of experts (Mixtral 8x7B: 8)")
          .add("experts_per_token", &MoeKeys::experts_per_token,
               "experts each token goes to (the router's top k; Mixtral: 2)")
          .add("expert_intermediate_size", &MoeKeys::expert_intermediate_size,
               "each expert's SwiGLU width; 0 = model.intermediate_size")
          .add("shared_expert_intermediate_size", &MoeKeys::shared_expert_intermediate_size,
               "the width of the shared expert every token passes through (Qwen2-MoE's, gated by a sigmoid); "
               "0 = none")
          .add("norm_topk_prob", &MoeKeys::norm_topk_prob,
               "the top k experts' weights renormalized to sum 1 (Mixtral always renormalizes)")
          .add("router_aux_loss_coef", &MoeKeys::router_aux_loss_coef,
               "the load-balancing loss's coefficient (Switch; transformers' router_aux_loss_coef), the loss the "
               "mean over the MoE layers; 0 = none")
          .add("router_z_loss_coef", &MoeKeys::router_z_loss_coef,
               "the router z-loss's coefficient (ST-MoE: 0.001), the mean over the MoE layers; 0 = none")
          .add("expert_capacity_factor", &MoeKeys::expert_capacity_factor,
               "0 = dropless (every token reaches its k experts); > 0: an expert takes at most ceil(factor x "
               "tokens x k / experts) picks a micro-batch, first picks first, and drops the rest");
  return table;
}

MoeKeys moe_keys(const ModelConfig& m) { return moe_key_table().read(m.family_keys); }

const KeyTable<MoeKeys>& mixtral_key_table() {
  static const KeyTable<MoeKeys> table =
      moe_key_table().only({"max_positions", "tie_embeddings", "n_kv_head", "intermediate_size", "rope_theta",
                            "experts", "experts_per_token", "router_aux_loss_coef", "router_z_loss_coef",
                            "expert_capacity_factor"});
  return table;
}

nn::MoeConfig moe_config(const ModelConfig& m, bool normalize_top_k) {
  const MoeKeys k = moe_keys(m);
  return {.experts = k.experts,
          .experts_per_token = k.experts_per_token,
          .expert_hidden = k.expert_intermediate_size > 0 ? k.expert_intermediate_size : llama_intermediate_size(m),
          .shared_hidden = k.shared_expert_intermediate_size,
          .normalize_top_k = normalize_top_k,
          .capacity_factor = k.expert_capacity_factor,
          .aux_loss_coef = k.router_aux_loss_coef,
          .z_loss_coef = k.router_z_loss_coef};
}

void validate_moe(const ModelConfig& m) {
  const MoeKeys k = moe_keys(m);
  TIDAL_CHECK(k.experts >= 1, "model.experts must be at least 1, got {}", k.experts);
  TIDAL_CHECK(k.experts_per_token >= 1 && k.experts_per_token <= k.experts,
              "model.experts_per_token ({}) must be from 1 to model.experts ({}): each token goes to that many of "
              "the experts", k.experts_per_token, k.experts);
  TIDAL_CHECK(k.router_aux_loss_coef >= 0 && k.router_z_loss_coef >= 0,
              "model.router_aux_loss_coef ({}) and model.router_z_loss_coef ({}) must be >= 0 (0 = no such loss)",
              k.router_aux_loss_coef, k.router_z_loss_coef);
  TIDAL_CHECK(k.expert_capacity_factor == 0 || k.expert_capacity_factor >= 0.01,
              "model.expert_capacity_factor = {}: 0 for dropless routing, or the capacity as a multiple of an "
              "expert's even share (1.25 is usual)", k.expert_capacity_factor);
}

Family mixtral_family() {
  Family f = llama_family();  // its norms, untied head, grouped queries and key checks
  f.name = "mixtral";
  f.title = "Mixtral";
  f.keys = mixtral_key_table().keys();
  f.build = [](const ModelBuild& b) {
    return make_llama(mixtral_config(b.config, b.checkpointing, b.embedding_on_host), b.layers);
  };
  f.decoder = [](Model& model, const ModelConfig& c) -> std::unique_ptr<Decoder> {
    return std::make_unique<LlamaDecoder>(model, mixtral_config(c), llama_context(c));
  };
  f.validate = [llama = f.validate](const ModelConfig& m) {
    llama(m);
    validate_moe(m);
  };
  f.traits = [](const ModelConfig& m) {
    ModelTraits t = llama_traits(m);
    t.experts = moe_keys(m).experts;
    return t;
  };
  f.hf = mixtral_hf_adapter();
  return f;
}

}  // namespace tidal::models
