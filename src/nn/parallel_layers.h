// The layer factory of this rank's place in the mesh: the sequence ring's layers when
// parallel.sequence > 1 (nn/sp/), else those of parallel.tensor.mode on the tensor groups
// (nn/tp/), and plain single-device layers for a tensor group of one.
#pragma once

#include "nn/layer_factory.h"
#include "parallel/context.h"

namespace tidal::nn {

std::unique_ptr<LayerFactory> make_layers(parallel::ParallelContext& pc);

}  // namespace tidal::nn
