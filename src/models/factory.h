// Builds the model that [model] names, through its family's spec (models/registry.h).
#pragma once

#include "models/decoder.h"
#include "models/model.h"
#include "models/model_config.h"
#include "nn/layer_factory.h"

namespace tidal::models {

// The model of `cfg`, its layers made by `layers` (the tensor-parallel mode's factory).
// `embedding_on_host`: memory.embedding_on_host.
std::unique_ptr<Model> make_model(const ModelConfig& cfg, const nn::CheckpointPolicy& checkpointing = {},
                                  nn::LayerFactory& layers = nn::single_device_layers(),
                                  bool embedding_on_host = false);

// Whether the family of `cfg` generates text (has a decoder).
bool generates_text(const ModelConfig& cfg);
// The decoder of `model` (a family that generates text, held whole by one process in fp32). Its
// weights are shared (views), except that weights on a GPU are copied to the host; a model whose
// weights are not plainly there (chunks, shards) is a tidal::Error, as is a family without one.
std::unique_ptr<Decoder> make_decoder(Model& model, const ModelConfig& cfg);

}  // namespace tidal::models
