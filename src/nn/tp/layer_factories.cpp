#include "nn/tp/layer_factories.h"

#include "nn/tp/layers_1d.h"
#include "nn/tp/layers_grid.h"

namespace tidal::nn::tp {

std::unique_ptr<LayerFactory> make_layers(parallel::ParallelContext& pc) {
  const parallel::MeshSpec& spec = pc.layout().spec();
  if (spec.tensor == 1) return make_single_device_layers();
  switch (spec.mode) {
    case parallel::TensorMode::d1: return layers_1d(pc.group(parallel::GroupKind::tensor));
    case parallel::TensorMode::d2:
    case parallel::TensorMode::d2p5: return layers_grid(pc);
    case parallel::TensorMode::d3: break;
  }
  throw Error(fmt::format("parallel.tensor.mode = \"{}\" is not available in this build yet; use \"1d\", \"2d\" or \"2.5d\"",
                          parallel::tensor_mode_name(spec.mode)));
}

}  // namespace tidal::nn::tp
