// Models of one's own: a program registers a model type by a function that builds its Model from
// the layer factory of the run's layout, and a config naming the type (model.type) trains it
// with everything the engine has - data, pipeline, tensor (every mode the layers it uses
// support) and sequence parallelism, chunks, ZeRO, offload, mixed precision, checkpoints.
// examples/parallel_block_gpt.cpp is one. The built-in families (gpt, bert, vit, llama) are
// registered the same way (models/factory.cpp).
#pragma once

#include "config/config.h"
#include "config/model_types.h"
#include "models/model.h"
#include "nn/layer_factory.h"

#include <functional>
#include <memory>
#include <string>

namespace tidal::models {

// What a builder gets: the [model] section, the layers of this rank's layout (build every layer
// that holds parameters or meets the batch through them), and the run's activation
// checkpointing of blocks (Model::add_blocks takes it) and memory.embedding_on_host.
struct ModelBuild {
  const config::ModelConfig& config;
  nn::LayerFactory& layers;
  nn::CheckpointPolicy checkpointing;
  bool embedding_on_host = false;
};
using ModelBuilder = std::function<std::unique_ptr<Model>(const ModelBuild&)>;

// Registers `type` (call it before the config is loaded). The task picks the data: causal_lm
// trains on next-token targets of token data (markov, tokens, text) as GPT does, masked_lm on
// BERT's masked tokens, image_classification on images. A name already taken is an error.
void register_model(const std::string& type, config::ModelTask task, ModelBuilder build);

}  // namespace tidal::models
