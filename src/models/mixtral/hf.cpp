#include "models/mixtral/hf.h"

#include "models/llama/hf.h"
#include "models/mixtral/family.h"

namespace tidal::models {
namespace {

// transformers' MixtralConfig defaults (4.40).
constexpr LlamaHfDefaults kMixtral{.n_layer = 32,
                                   .n_head = 32,
                                   .n_embd = 4096,
                                   .intermediate_size = 14336,
                                   .vocab_size = 32000,
                                   .max_positions = 4096 * 32};

std::vector<std::string> mixtral_from_hf(const io::HfConfigKeys& k, ModelConfig& m) {
  MoeKeys e;
  std::vector<std::string> decided = read_llama_shape(k, m, e, kMixtral);
  e.experts = k.positive<int>("num_local_experts", 8);
  e.experts_per_token = k.positive<int>("num_experts_per_tok", 2);
  e.router_aux_loss_coef = k.get<double>("router_aux_loss_coef", 0.001);
  k.require("router_jitter_noise", 0.0, "a router without jitter");
  const std::int64_t window = k.get<std::int64_t>("sliding_window", 0);
  TIDAL_CHECK(window == 0 || window >= e.max_positions,
              "{}: \"sliding_window\" is {}, shorter than the model's {} positions; tidal attends over every earlier "
              "position", k.file(), window, e.max_positions);
  for (std::string& name : mixtral_key_table().write(e, m.family_keys)) decided.push_back(std::move(name));
  return decided;
}

nlohmann::json mixtral_to_hf(const ModelConfig& m) {
  const MoeKeys e = moe_keys(m);
  nlohmann::json j = llama_shape_json(m);
  j.update({{"model_type", "mixtral"},
            {"num_local_experts", e.experts},
            {"num_experts_per_tok", e.experts_per_token},
            {"router_aux_loss_coef", e.router_aux_loss_coef},
            {"output_router_logits", e.router_aux_loss_coef > 0},
            {"router_jitter_noise", 0.0},
            {"sliding_window", nullptr}});
  return j;
}

}  // namespace

HfAdapter mixtral_hf_adapter() {
  return {.model_type = "mixtral",
          .architecture = "MixtralForCausalLM",
          .base_prefix = "model.",
          .read = mixtral_from_hf,
          .write = mixtral_to_hf,
          .tensors = [](const ModelConfig& m) {
            const std::int64_t C = m.n_embd, I = llama_intermediate_size(m);
            const int experts = moe_keys(m).experts;
            return llama_hf_tensors(m, false, false, [&](io::HfTensorSources& src, const std::string& t,
                                                         const std::string& h) {
              const std::string moe = h + "block_sparse_moe.";
              src.one(t + "gate.weight", moe + "gate.weight", {experts, C});
              for (int e = 0; e < experts; ++e) {
                const std::string te = fmt::format("{}experts.{}.", t, e), he = fmt::format("{}experts.{}.", moe, e);
                src.add(te + "fc.weight", {he + "w1.weight", he + "w3.weight"}, {{I, C}, {I, C}});
                src.one(te + "proj.weight", he + "w2.weight", {C, I});
              }
            });
          }};
}

}  // namespace tidal::models
