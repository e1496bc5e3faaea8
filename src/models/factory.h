// Builds the model that [model] names.
#pragma once

#include "config/config.h"
#include "models/model.h"

namespace tidal::models {

std::unique_ptr<Model> make_model(const config::ModelConfig& cfg, const nn::CheckpointPolicy& checkpointing = {});

}  // namespace tidal::models
