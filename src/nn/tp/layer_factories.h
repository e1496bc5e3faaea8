// The layer factory of this rank's tensor-parallel mode (parallel.tensor.mode and .size): plain
// layers for a tensor group of one, else the mode's layers on the context's tensor groups.
#pragma once

#include "nn/layer_factory.h"
#include "parallel/context.h"

namespace tidal::nn::tp {

std::unique_ptr<LayerFactory> make_layers(parallel::ParallelContext& pc);

}  // namespace tidal::nn::tp
