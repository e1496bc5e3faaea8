// The layer factory of this rank's place in the mesh: the sequence ring's layers when
// parallel.sequence > 1 (nn/sp/), else those of parallel.tensor.mode on the tensor groups
// (nn/tp/), and plain single-device layers for a tensor group of one.
#pragma once

#include "nn/layer_factory.h"
#include "parallel/context.h"

namespace tidal::nn {

// The tensor-parallel layers' choice between memory and traffic (keep_gathered), the memory-lean
// one by default since memory is the advanced modes' reason to exist: 3D keeps the input blocks
// it gathers in forward for backward, or gathers them again there; 2.5D holds its weight blocks
// whole in every depth layer, or one depth slice each (each element once in the tensor group,
// the others' slices broadcast over the depth group when used). 1D and 2D hold nothing twice.
struct TensorOptions {
  bool keep_gathered = false;
};

std::unique_ptr<LayerFactory> make_layers(parallel::ParallelContext& pc, const TensorOptions& options = {});

}  // namespace tidal::nn
