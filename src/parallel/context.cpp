#include "parallel/context.h"

#include "comm/self_communicator.h"
#include "core/error.h"
#if TIDAL_MPI
#include "comm/mpi_runtime.h"
#endif

namespace tidal::parallel {

int launched_world_size([[maybe_unused]] const comm::MpiRuntime* runtime) {
#if TIDAL_MPI
  if (runtime != nullptr) return runtime->world_size();
#endif
  return 1;
}

MeshSpec mesh_spec(const config::Config& cfg, int world_size, int ranks_per_node) {
  const config::ParallelConfig& p = cfg.parallel;
  return {.world_size = world_size,
          .data = p.data,
          .pipeline = p.pipeline,
          .tensor = p.tensor.size,
          .sequence = p.sequence,
          .sequence_zigzag = p.sequence_zigzag,
          .sequence_mode = p.sequence_mode,
          .mode = p.tensor.mode,
          .depth = p.tensor.depth,
          .ranks_per_node = p.ranks_per_node > 0 ? p.ranks_per_node : ranks_per_node};
}

ParallelContext::ParallelContext(const config::Config& cfg, [[maybe_unused]] comm::MpiRuntime* runtime)
#if TIDAL_MPI
    : layout_(mesh_spec(cfg, runtime ? runtime->world_size() : 1, runtime ? runtime->local_size() : 0)),
      rank_(runtime ? runtime->world_rank() : 0),
#else
    : layout_(mesh_spec(cfg, 1, 0)),
#endif
      coords_(layout_.coordinates(rank_)) {
  check_model_fits(layout_, cfg.model.n_layer, cfg.model.n_head, cfg.model.n_embd, cfg.model.seq_len,
                   cfg.model.type == "vit" ? cfg.model.num_classes : 0, cfg.model.n_kv_head);
  const std::int64_t B = cfg.train.batch_size, replicas = cfg.parallel.data;
  TIDAL_CHECK(B % replicas == 0,
              "train.batch_size ({}) must be divisible by parallel.data ({}): each replica takes an equal slice of "
              "the global batch",
              B, replicas);
  const std::int64_t micro = cfg.train.micro_batch_size;
  TIDAL_CHECK(micro == 0 || (B / replicas) % micro == 0,
              "train.micro_batch_size ({}) must divide the per-replica batch train.batch_size / parallel.data = {}",
              micro, B / replicas);
  // 2D, 2.5D and 3D split every micro-batch's samples over the tensor grid too.
  const MeshSpec& spec = layout_.spec();
  const int side = layout_.tensor_side();
  const std::int64_t sample_parts = spec.tensor == 1 || spec.mode == TensorMode::d1 ? 1
                                    : spec.mode == TensorMode::d2                 ? side
                                    : spec.mode == TensorMode::d2p5               ? side * spec.depth
                                                                                  : side * side;
  TIDAL_CHECK((micro ? micro : B / replicas) % sample_parts == 0,
              "the micro-batch ({} samples: train.micro_batch_size, or train.batch_size / parallel.data) must be "
              "divisible by {}: parallel.tensor.mode = \"{}\" splits each micro-batch's samples over {} rows of the "
              "tensor grid",
              micro ? micro : B / replicas, sample_parts, spec.mode, sample_parts);
  const comm::Seconds timeout(cfg.parallel.timeout_s);
  // Every rank creates the same groups in the same order (creation is collective).
  for (GroupKind kind : kAllGroupKinds) {
    const auto all = layout_.groups(kind);
    std::shared_ptr<comm::Communicator> c;
#if TIDAL_MPI
    if (runtime && all.front().size() > 1) c = runtime->split(std::string(group_name(kind)), all, timeout);
#endif
    if (!c) c = std::make_shared<comm::SelfCommunicator>(std::string(group_name(kind)));
    groups_[kind] = std::make_shared<comm::CountingCommunicator>(std::move(c));
  }
}

comm::Communicator& ParallelContext::group(GroupKind kind) { return *groups_.at(kind); }

nlohmann::json ParallelContext::communication_stats() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [kind, c] : groups_) {
    for (const auto& [op, s] : c->stats()) {
      out[std::string(group_name(kind))][op] = {
          {"calls", s.calls}, {"elements", s.elements}, {"bytes_sent", s.bytes_sent}, {"link_bytes", s.link_bytes},
          {"seconds", s.seconds}};
    }
  }
  return out;
}

void ParallelContext::reset_communication_stats() {
  for (auto& [kind, c] : groups_) c->reset();
}

nlohmann::json ParallelContext::describe() const {
  const MeshSpec& s = layout_.spec();
  return {{"world_size", s.world_size},         {"data", s.data},
          {"pipeline", s.pipeline},             {"tensor", s.tensor},
          {"tensor_mode", std::string(config::name_of(s.mode))}, {"sequence", s.sequence},
          {"ranks_per_node", s.ranks_per_node}};
}

}  // namespace tidal::parallel
