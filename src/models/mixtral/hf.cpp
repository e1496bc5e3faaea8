#include "models/mixtral/hf.h"

#include "models/llama/family.h"
#include "models/llama/hf.h"

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
  std::vector<std::string> decided = read_llama_shape(k, m, kMixtral);
  m.experts = k.positive<int>("num_local_experts", 8);
  m.experts_per_token = k.positive<int>("num_experts_per_tok", 2);
  m.router_aux_loss_coef = k.get<double>("router_aux_loss_coef", 0.001);
  k.require("router_jitter_noise", 0.0, "a router without jitter");
  const std::int64_t window = k.get<std::int64_t>("sliding_window", 0);
  TIDAL_CHECK(window == 0 || window >= m.max_positions,
              "{}: \"sliding_window\" is {}, shorter than the model's {} positions; tidal attends over every earlier "
              "position", k.file(), window, m.max_positions);
  decided.insert(decided.end(), {"model.experts", "model.experts_per_token", "model.router_aux_loss_coef"});
  return decided;
}

nlohmann::json mixtral_to_hf(const ModelConfig& m) {
  nlohmann::json j = llama_shape_json(m);
  j.update({{"model_type", "mixtral"},
            {"num_local_experts", m.experts},
            {"num_experts_per_tok", m.experts_per_token},
            {"router_aux_loss_coef", m.router_aux_loss_coef},
            {"output_router_logits", m.router_aux_loss_coef > 0},
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
            return llama_hf_tensors(m, false, false, [&](io::HfTensorSources& src, const std::string& t,
                                                         const std::string& h) {
              const std::string moe = h + "block_sparse_moe.";
              src.one(t + "gate.weight", moe + "gate.weight", {m.experts, C});
              for (int e = 0; e < m.experts; ++e) {
                const std::string te = fmt::format("{}experts.{}.", t, e), he = fmt::format("{}experts.{}.", moe, e);
                src.add(te + "fc.weight", {he + "w1.weight", he + "w3.weight"}, {{I, C}, {I, C}});
                src.one(te + "proj.weight", he + "w2.weight", {C, I});
              }
            });
          }};
}

}  // namespace tidal::models
