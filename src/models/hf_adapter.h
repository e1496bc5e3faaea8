// A family's Hugging Face adapter: its config.json both ways and where each of its parameters
// lives in the task model's state dict. model.init_from reads a directory through the family
// whose model_type it names (config/hf_model.h), the weights come in through the tensors it lists
// (engine/hf_checkpoint.h), and tidal export writes both back.
#pragma once

#include "io/hf_config.h"
#include "io/hf_layout.h"
#include "models/model_config.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

namespace tidal::models {

struct HfAdapter {
  std::string model_type;    // config.json's model_type ("gpt2"); "" = the family has no adapter
  std::string architecture;  // the task model's class ("GPT2LMHeadModel")
  std::string base_prefix;   // the base model's prefix in the task model's state dict ("transformer.")
  // Reads config.json as transformers' config class does into `m`'s architecture keys; returns
  // the keys it decided ("model.n_layer", ...), which a config may not contradict.
  std::function<std::vector<std::string>(const io::HfConfigKeys&, ModelConfig& m)> read;
  // config.json's keys for a model of `m` (model_type, sizes, ...; io::hf_config_text adds the rest).
  std::function<nlohmann::json(const ModelConfig& m)> write;
  // Where each parameter of a model of `m` lives, in tidal's model order.
  std::function<std::vector<io::HfTensorSource>(const ModelConfig& m)> tensors;
  // Tensors transformers itself skips on load (attention-mask buffers, position_ids, heads of
  // other tasks), by canonical name.
  std::function<bool(const std::string& name)> ignored_on_load = [](const std::string&) { return false; };

  explicit operator bool() const { return !model_type.empty(); }
};

}  // namespace tidal::models
