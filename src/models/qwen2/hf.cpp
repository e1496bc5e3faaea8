#include "models/qwen2/hf.h"

#include "models/llama/hf.h"

namespace tidal::models {
namespace {

// transformers' Qwen2Config defaults (4.40).
constexpr LlamaHfDefaults kQwen2{.n_layer = 32,
                                 .n_head = 32,
                                 .n_embd = 4096,
                                 .intermediate_size = 22016,
                                 .vocab_size = 151936,
                                 .max_positions = 32768};

std::vector<std::string> qwen2_from_hf(const io::HfConfigKeys& k, ModelConfig& m) {
  LlamaKeys l;
  std::vector<std::string> decided = read_llama_shape(k, m, l, kQwen2);
  k.require("use_sliding_window", false, "attention over every earlier position");
  for (std::string& name : llama_key_table().write(l, m.family_keys)) decided.push_back(std::move(name));
  return decided;
}

// sliding_window: the model's positions, as transformers 4.40 applies the window to its causal
// mask even with use_sliding_window false, and tidal attends over every earlier position.
nlohmann::json qwen2_to_hf(const ModelConfig& m) {
  nlohmann::json j = llama_shape_json(m);
  j.update({{"model_type", "qwen2"},
            {"use_sliding_window", false},
            {"sliding_window", j["max_position_embeddings"]},
            {"max_window_layers", m.n_layer}});
  return j;
}

}  // namespace

HfAdapter qwen2_hf_adapter() {
  return {.model_type = "qwen2",
          .architecture = "Qwen2ForCausalLM",
          .base_prefix = "model.",
          .read = qwen2_from_hf,
          .write = qwen2_to_hf,
          .tensors = [](const ModelConfig& m) { return llama_hf_tensors(m, true, false); }};
}

}  // namespace tidal::models
