#include "nn/parallel_layers.h"

#include "nn/sp/sequence_layers.h"
#include "nn/tp/layers_1d.h"
#include "nn/tp/layers_3d.h"
#include "nn/tp/layers_grid.h"

namespace tidal::nn {

namespace {

std::unique_ptr<LayerFactory> layout_layers(parallel::ParallelContext& pc, const TensorOptions& options) {
  const parallel::MeshSpec& spec = pc.layout().spec();
  if (spec.sequence > 1) return sp::layers_sequence(pc.group(parallel::GroupKind::sequence), spec.sequence_zigzag,
                                                     spec.sequence_mode);
  if (spec.tensor == 1) return make_single_device_layers();
  switch (spec.mode) {
    case parallel::TensorMode::d1: return tp::layers_1d(pc.group(parallel::GroupKind::tensor));
    case parallel::TensorMode::d2:
    case parallel::TensorMode::d2p5: return tp::layers_grid(pc, options.keep_gathered);
    case parallel::TensorMode::d3: return tp::layers_3d(pc, options.keep_gathered);
  }
  throw Error(fmt::format("tensor mode {} has no layers", int(spec.mode)));
}

}  // namespace

std::unique_ptr<LayerFactory> make_layers(parallel::ParallelContext& pc, const TensorOptions& options) {
  std::unique_ptr<LayerFactory> layers = layout_layers(pc, options);
  if (pc.layout().spec().expert > 1) layers->set_expert_group(&pc.group(parallel::GroupKind::expert));
  return layers;
}

}  // namespace tidal::nn
