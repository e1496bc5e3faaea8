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

nn::MoeConfig moe_config(const ModelConfig& m, bool normalize_top_k) {
  return {.experts = m.experts,
          .experts_per_token = m.experts_per_token,
          .expert_hidden = m.expert_intermediate_size > 0 ? m.expert_intermediate_size : llama_intermediate_size(m),
          .shared_hidden = m.shared_expert_intermediate_size,
          .normalize_top_k = normalize_top_k,
          .capacity_factor = m.expert_capacity_factor,
          .aux_loss_coef = m.router_aux_loss_coef,
          .z_loss_coef = m.router_z_loss_coef};
}

void validate_moe(const ModelConfig& m) {
  TIDAL_CHECK(m.experts >= 1, "model.experts must be at least 1, got {}", m.experts);
  TIDAL_CHECK(m.experts_per_token >= 1 && m.experts_per_token <= m.experts,
              "model.experts_per_token ({}) must be from 1 to model.experts ({}): each token goes to that many of "
              "the experts", m.experts_per_token, m.experts);
  TIDAL_CHECK(m.router_aux_loss_coef >= 0 && m.router_z_loss_coef >= 0,
              "model.router_aux_loss_coef ({}) and model.router_z_loss_coef ({}) must be >= 0 (0 = no such loss)",
              m.router_aux_loss_coef, m.router_z_loss_coef);
  TIDAL_CHECK(m.expert_capacity_factor == 0 || m.expert_capacity_factor >= 0.01,
              "model.expert_capacity_factor = {}: 0 for dropless routing, or the capacity as a multiple of an "
              "expert's even share (1.25 is usual)", m.expert_capacity_factor);
}

Family mixtral_family() {
  Family f = llama_family();  // its norms, untied head, grouped queries and key checks
  f.name = "mixtral";
  f.title = "Mixtral";
  f.keys = {"max_positions", "tie_embeddings", "n_kv_head", "intermediate_size", "rope_theta", "experts",
            "experts_per_token", "router_aux_loss_coef", "router_z_loss_coef", "expert_capacity_factor"};
  f.build = [](const ModelBuild& b) {
    return make_llama(mixtral_config(b.config, b.checkpointing, b.embedding_on_host), b.layers);
  };
  f.decoder = [](Model& model, const ModelConfig& c) -> std::unique_ptr<Decoder> {
    return std::make_unique<LlamaDecoder>(model, mixtral_config(c), c.max_positions ? c.max_positions : c.seq_len);
  };
  f.validate = [llama = f.validate](const ModelConfig& m) {
    llama(m);
    validate_moe(m);
  };
  f.routed = true;
  f.hf = mixtral_hf_adapter();
  return f;
}

}  // namespace tidal::models
