#include "engine/expert_metrics.h"

#include <algorithm>

namespace tidal::engine {

nlohmann::json expert_metrics(const nn::ExpertRecord& record, parallel::ParallelContext& pc, int n_layer,
                              int experts) {
  // Per layer: [tokens of each expert | dropped | balance loss | z-loss], summed over the world. A
  // stage's ranks add their layers; a sequence-parallel rank its positions' rows; a replica its
  // samples, its losses already weighted by its share of the step's targets.
  const std::size_t E = std::size_t(experts), width = E + 3;
  Tensor sums = Tensor::zeros({std::int64_t(n_layer) * std::int64_t(width)}, DType::f32, host_allocator());
  float* v = sums.data<float>();
  for (const auto& [layer, load] : record.layers) {
    float* row = v + std::size_t(layer) * width;
    for (std::size_t e = 0; e < std::min(E, load.tokens.size()); ++e) row[e] = float(load.tokens[e]);
    row[E] = float(load.dropped);
    row[E + 1] = float(load.balance_loss);
    row[E + 2] = float(load.z_loss);
  }
  if (pc.world_size() > 1) pc.group(parallel::GroupKind::world).all_reduce(sums)->wait();
  // The tensor group's ranks route the same rows (features whole under 1D): one copy of each; the
  // losses are the replica's on each of its tensor and sequence ranks.
  const parallel::MeshSpec& spec = pc.layout().spec();
  const double row_copies = spec.tensor, loss_copies = double(spec.tensor) * spec.sequence;
  nlohmann::json layers = nlohmann::json::object();
  double worst = 0, dropped = 0, balance = 0, z = 0;
  for (int l = 0; l < n_layer; ++l) {
    const float* row = v + std::size_t(l) * width;
    double total = 0, most = 0;
    for (std::size_t e = 0; e < E; ++e) {
      total += row[e] / row_copies;
      most = std::max(most, row[e] / row_copies);
    }
    const double ratio = total > 0 ? most / (total / double(E)) : 0.0;
    layers[std::to_string(l)] = {{"tokens_per_expert_max_over_mean", ratio},
                                 {"dropped_tokens", row[E] / row_copies},
                                 {"aux_loss", row[E + 1] / loss_copies},
                                 {"z_loss", row[E + 2] / loss_copies}};
    worst = std::max(worst, ratio);
    dropped += row[E] / row_copies;
    balance += row[E + 1] / loss_copies / n_layer;
    z += row[E + 2] / loss_copies / n_layer;
  }
  nlohmann::json out = {{"tokens_per_expert_max_over_mean", worst}, {"dropped_tokens", dropped}, {"aux_loss", balance},
                        {"z_loss", z}, {"layers", layers}};
  if (spec.expert > 1)  // this rank's, as the step's communication record is
    out["exchange"] = {{"rows_sent", record.rows_sent}, {"rows_received", record.rows_received}};
  return out;
}

}  // namespace tidal::engine
