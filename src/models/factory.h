// Builds the model that [model] names.
#pragma once

#include "config/config.h"
#include "models/gpt.h"
#include "models/llama.h"
#include "models/model.h"
#include "nn/layer_factory.h"

namespace tidal::models {

// The activation checkpointing train.activation_checkpointing, train.activation_offload and
// train.loss_chunks ask for.
nn::CheckpointPolicy checkpoint_policy(const config::TrainConfig& tc);

// The GPT options [model] gives (model.type = "gpt"): what make_model builds, and what the
// sampler runs.
GptConfig gpt_config(const config::ModelConfig& cfg, const nn::CheckpointPolicy& checkpointing = {},
                     bool embedding_on_host = false);

// The Llama options [model] gives (model.type = "llama").
LlamaConfig llama_config(const config::ModelConfig& cfg, const nn::CheckpointPolicy& checkpointing = {},
                         bool embedding_on_host = false);

// The model of `cfg`, its layers made by `layers` (the tensor-parallel mode's factory).
// `embedding_on_host`: memory.embedding_on_host.
std::unique_ptr<Model> make_model(const config::ModelConfig& cfg, const nn::CheckpointPolicy& checkpointing = {},
                                  nn::LayerFactory& layers = nn::single_device_layers(),
                                  bool embedding_on_host = false);

}  // namespace tidal::models
