#include "models/qwen2_moe/hf.h"

#include "models/llama/hf.h"
#include "models/qwen2_moe/family.h"

namespace tidal::models {
namespace {

// transformers' Qwen2MoeConfig defaults (4.40).
constexpr LlamaHfDefaults kQwen2Moe{.n_layer = 24,
                                    .n_head = 16,
                                    .n_embd = 2048,
                                    .intermediate_size = 5632,
                                    .vocab_size = 151936,
                                    .max_positions = 32768};

std::vector<std::string> qwen2_moe_from_hf(const io::HfConfigKeys& k, ModelConfig& m) {
  MoeKeys e;
  std::vector<std::string> decided = read_llama_shape(k, m, e, kQwen2Moe);
  k.require("use_sliding_window", false, "attention over every earlier position");
  k.require("decoder_sparse_step", 1, "a mixture of experts in every block");
  TIDAL_CHECK(!k.has("mlp_only_layers") || k.get<std::vector<int>>("mlp_only_layers", {}).empty(),
              "{}: \"mlp_only_layers\" names dense blocks; tidal builds a mixture of experts in every block", k.file());
  e.experts = k.positive<int>("num_experts", 60);
  e.experts_per_token = k.positive<int>("num_experts_per_tok", 4);
  e.expert_intermediate_size = k.positive<std::int64_t>("moe_intermediate_size", 1408);
  e.shared_expert_intermediate_size = k.positive<std::int64_t>("shared_expert_intermediate_size", 5632);
  e.norm_topk_prob = k.get<bool>("norm_topk_prob", false);
  e.router_aux_loss_coef = k.get<double>("router_aux_loss_coef", 0.001);
  for (std::string& name : qwen2_moe_key_table().write(e, m.family_keys)) decided.push_back(std::move(name));
  return decided;
}

// sliding_window: the model's positions, as for Qwen2 (models/qwen2/hf.cpp).
nlohmann::json qwen2_moe_to_hf(const ModelConfig& m) {
  const MoeKeys e = moe_keys(m);
  nlohmann::json j = llama_shape_json(m);
  j.update({{"model_type", "qwen2_moe"},
            {"use_sliding_window", false},
            {"sliding_window", j["max_position_embeddings"]},
            {"max_window_layers", m.n_layer},
            {"decoder_sparse_step", 1},
            {"num_experts", e.experts},
            {"num_experts_per_tok", e.experts_per_token},
            {"moe_intermediate_size", e.expert_intermediate_size > 0 ? e.expert_intermediate_size : j["intermediate_size"].get<std::int64_t>()},
            {"shared_expert_intermediate_size", e.shared_expert_intermediate_size},
            {"norm_topk_prob", e.norm_topk_prob},
            {"router_aux_loss_coef", e.router_aux_loss_coef},
            {"output_router_logits", e.router_aux_loss_coef > 0}});
  return j;
}

}  // namespace

HfAdapter qwen2_moe_hf_adapter() {
  return {.model_type = "qwen2_moe",
          .architecture = "Qwen2MoeForCausalLM",
          .base_prefix = "model.",
          .read = qwen2_moe_from_hf,
          .write = qwen2_moe_to_hf,
          .tensors = [](const ModelConfig& m) {
            const MoeKeys e = moe_keys(m);
            const std::int64_t C = m.n_embd, I = qwen2_moe_to_hf(m)["moe_intermediate_size"].get<std::int64_t>();
            return llama_hf_tensors(m, true, false, [&](io::HfTensorSources& src, const std::string& t,
                                                        const std::string& h) {
              src.one(t + "gate.weight", h + "mlp.gate.weight", {e.experts, C});
              for (int x = 0; x < e.experts; ++x)
                llama_hf_mlp(src, fmt::format("{}experts.{}.", t, x), h, C, I, fmt::format("mlp.experts.{}.", x));
              if (e.shared_expert_intermediate_size > 0) {
                llama_hf_mlp(src, t + "shared_expert.", h, C, e.shared_expert_intermediate_size, "mlp.shared_expert.");
                src.one(t + "shared_expert_gate.weight", h + "mlp.shared_expert_gate.weight", {1, C});
              }
            });
          }};
}

}  // namespace tidal::models
