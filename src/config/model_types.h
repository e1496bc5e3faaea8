// The model types a config may name (model.type): the built-in families and the types a program
// registers with models::register_model (models/registry.h). What the config knows of a type is
// its task, which picks the data it trains on and the checks its keys get; how it is built lives
// with the models.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace tidal::config {

enum class ModelTask {
  causal_lm,             // next-token prediction on token data (gpt, llama)
  masked_lm,             // masked tokens (bert)
  image_classification,  // labelled images (vit)
};

// Adds `type` (a user's model) with its task; a name already taken is an error naming it.
void add_model_type(const std::string& type, ModelTask task);
// The task of `type`, if a config may name it.
std::optional<ModelTask> model_task(const std::string& type);
// "gpt | bert | vit | llama" and the registered ones, in the order added.
std::string model_type_names();
// One of the built-in families (gpt, bert, vit, llama): what Hugging Face checkpoints, export and
// text generation know.
bool builtin_model_type(const std::string& type);

}  // namespace tidal::config
