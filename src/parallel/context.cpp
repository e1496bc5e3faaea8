#include "parallel/context.h"

#include "comm/device_communicator.h"
#include "comm/planning_communicator.h"
#include "comm/self_communicator.h"
#include "comm/staged_communicator.h"
#include "core/error.h"
#include "core/gpu.h"
#if TIDAL_MPI
#include "comm/mpi_runtime.h"
#endif
#if TIDAL_NCCL
#include "comm/nccl_communicator.h"
#endif

namespace tidal::parallel {

int launched_world_size([[maybe_unused]] const comm::MpiRuntime* runtime) {
#if TIDAL_MPI
  if (runtime != nullptr) return runtime->world_size();
#endif
  return 1;
}

MeshSpec mesh_spec(const ContextOptions& o, int world_size, int ranks_per_node) {
  MeshSpec spec = o.mesh;
  spec.world_size = world_size;
  if (spec.ranks_per_node <= 0) spec.ranks_per_node = ranks_per_node;
  return spec;
}

namespace {

// What every layout needs of the model and the batch (tidal::Error naming the keys).
void check_options_fit(const ContextOptions& o, const Layout& layout) {
  check_model_fits(layout, o.n_layer, o.n_head, o.n_embd, o.seq_len, o.num_classes, o.n_kv_head);
  const std::int64_t B = o.batch_size, replicas = layout.spec().data;
  TIDAL_CHECK(B % replicas == 0,
              "train.batch_size ({}) must be divisible by parallel.data ({}): each replica takes an equal slice of "
              "the global batch",
              B, replicas);
  const std::int64_t micro = o.micro_batch_size;
  TIDAL_CHECK(micro == 0 || (B / replicas) % micro == 0,
              "train.micro_batch_size ({}) must divide the per-replica batch train.batch_size / parallel.data = {}",
              micro, B / replicas);
  // 2D, 2.5D and 3D split every micro-batch's samples over the tensor grid too.
  const MeshSpec& spec = layout.spec();
  const std::int64_t sample_parts = layout.sample_parts();
  TIDAL_CHECK((micro ? micro : B / replicas) % sample_parts == 0,
              "the micro-batch ({} samples: train.micro_batch_size, or train.batch_size / parallel.data) must be "
              "divisible by {}: parallel.tensor.mode = \"{}\" splits each micro-batch's samples over {} rows of the "
              "tensor grid",
              micro ? micro : B / replicas, sample_parts, tensor_mode_name(spec.mode), sample_parts);
}

#if TIDAL_MPI
// parallel.gpu_collectives settled alike on every rank: NCCL where asked, or (auto) where every
// node's ranks have GPUs of their own and this build has NCCL; staged otherwise.
bool nccl_between_gpus(GpuCollectives asked, comm::MpiRuntime& runtime, comm::Seconds timeout) {
  if (asked == GpuCollectives::staged) return false;
  Tensor own = Tensor::full({1}, runtime.local_size() <= gpu_count() ? 1.0f : 0.0f, host_allocator());
  runtime.world(timeout)->all_reduce(own, {.op = comm::ReduceOp::min})->wait();
  const bool everyone_owns = own.data<float>()[0] > 0.0f;
  if (asked == GpuCollectives::automatic) return everyone_owns && TIDAL_NCCL;
  TIDAL_CHECK(TIDAL_NCCL, "parallel.gpu_collectives = \"nccl\", but this build has no NCCL: rebuild where NCCL is "
              "installed (libnccl-dev), or set parallel.gpu_collectives = \"staged\"");
  TIDAL_CHECK(everyone_owns,
              "parallel.gpu_collectives = \"nccl\" needs a GPU for every rank, and on rank {}'s node {} ranks share {} "
              "GPU(s) (NCCL rejects two ranks on one GPU): set parallel.gpu_collectives = \"staged\" (or \"auto\"), or "
              "launch at most one rank per GPU",
              runtime.world_rank(), runtime.local_size(), gpu_count());
  return true;
}
#endif

}  // namespace

ParallelContext::ParallelContext(const ContextOptions& o, [[maybe_unused]] comm::MpiRuntime* runtime)
#if TIDAL_MPI
    : layout_(mesh_spec(o, runtime ? runtime->world_size() : 1, runtime ? runtime->local_size() : 0)),
      rank_(runtime ? runtime->world_rank() : 0),
#else
    : layout_(mesh_spec(o, 1, 0)),
#endif
      coords_(layout_.coordinates(rank_)) {
  check_options_fit(o, layout_);
  const comm::Seconds timeout(o.timeout_s);
#if TIDAL_MPI
  const bool on_gpus = runtime && runtime->world_size() > 1 && o.on_gpu;
  if (on_gpus) {
    TIDAL_CHECK(gpu_available(),
                "train.device = \"cuda\", but rank {} sees {}: run it where a GPU is visible (check "
                "CUDA_VISIBLE_DEVICES and nvidia-smi), or set train.device = \"cpu\"",
                runtime->world_rank(), gpu_description());
    use_gpu_of_local_rank(runtime->local_rank());
    // Each rank's device tier would claim the GPU's free memory as its own.
    TIDAL_CHECK(o.offload_without_limit.empty() || runtime->local_size() <= gpu_count(),
                "memory.offload = \"{}\" with {} ranks sharing {} GPU(s) on rank {}'s node: set memory.device_limit "
                "(each rank's share of a GPU, e.g. --set memory.device_limit=8GiB), or launch at most one rank per GPU",
                o.offload_without_limit, runtime->local_size(), gpu_count(), runtime->world_rank());
    gpu_collectives_ = nccl_between_gpus(o.gpu_collectives, *runtime, timeout) ? "nccl" : "staged";
  }
#endif
  // Every rank creates the same groups in the same order (creation is collective).
  for (GroupKind kind : kAllGroupKinds) {
    const auto all = layout_.groups(kind);
    std::shared_ptr<comm::Communicator> c;
#if TIDAL_MPI
    if (runtime && all.front().size() > 1) {
      c = runtime->split(std::string(group_name(kind)), all, timeout);
      if (on_gpus) {
        // GPU tensors through pinned host buffers over MPI (what lets ranks share a GPU); with
        // NCCL, the collectives whose operands are all on the GPU go GPU to GPU instead.
        std::shared_ptr<comm::Staging> staging = comm::gpu_staging();
        std::shared_ptr<comm::Communicator> on_gpu = std::make_shared<comm::StagedCommunicator>(c, staging);
#if TIDAL_NCCL
        if (gpu_collectives_ == "nccl")
          on_gpu = std::make_shared<comm::DeviceCommunicator>(
              comm::nccl_on_current_gpu(*c, timeout), std::move(on_gpu),
              [staging](const Tensor& t) { return staging->needs_staging(t); });
#endif
        c = std::move(on_gpu);
      }
    }
#endif
    if (!c) c = std::make_shared<comm::SelfCommunicator>(std::string(group_name(kind)));
    groups_[kind] = std::make_shared<comm::CountingCommunicator>(std::move(c));
  }
#if TIDAL_MPI
  if (runtime && runtime->world_size() > 1)
    background_ = runtime->split("background", layout_.groups(GroupKind::world), timeout);
#endif
  if (!background_) background_ = std::make_shared<comm::SelfCommunicator>("background");
}

ParallelContext::ParallelContext(const ContextOptions& o, const MeshSpec& spec, int rank)
    : layout_(spec), rank_(rank), coords_(layout_.coordinates(rank)) {
  check_options_fit(o, layout_);
  for (GroupKind kind : kAllGroupKinds) {
    const std::vector<int> members = layout_.group(kind, rank);
    auto c = std::make_shared<comm::PlanningCommunicator>(std::string(group_name(kind)), members,
                                                          layout_.group_index(kind, rank));
    groups_[kind] = std::make_shared<comm::CountingCommunicator>(std::move(c));
  }
  background_ = std::make_shared<comm::PlanningCommunicator>("background", layout_.group(GroupKind::world, rank), rank);
}

ParallelContext ParallelContext::planned(const ContextOptions& o, int world_size, int rank, int ranks_per_node) {
  return ParallelContext(o, mesh_spec(o, world_size, ranks_per_node), rank);
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

nlohmann::json ParallelContext::per_rank(const nlohmann::json& mine) {
  comm::Communicator& world = group(GroupKind::world);
  // Two 30-bit halves per value in int32 (the communicators' integer type), exact to 2^60.
  constexpr std::int64_t kHalf = std::int64_t(1) << 30;
  const std::int64_t n = std::int64_t(mine.size());
  Tensor local = Tensor::empty({2 * n}, DType::i32, host_allocator());
  std::int64_t k = 0;
  for (const auto& [key, value] : mine.items()) {
    local.data<std::int32_t>()[2 * k] = std::int32_t(value.get<std::int64_t>() / kHalf);
    local.data<std::int32_t>()[2 * k + 1] = std::int32_t(value.get<std::int64_t>() % kHalf);
    ++k;
  }
  Tensor all = Tensor::empty({2 * n * world.size()}, DType::i32, host_allocator());
  world.all_gather(all, local)->wait();
  nlohmann::json out = nlohmann::json::object();
  k = 0;
  for (const auto& [key, value] : mine.items()) {
    std::vector<std::int64_t> values;
    for (int r = 0; r < world.size(); ++r) {
      const std::int32_t* v = all.data<std::int32_t>() + 2 * (n * r + k);
      values.push_back(v[0] * kHalf + v[1]);
    }
    out[key + "_per_rank"] = values;
    ++k;
  }
  return out;
}

nlohmann::json ParallelContext::describe() const {
  const MeshSpec& s = layout_.spec();
  nlohmann::json out = {{"world_size", s.world_size},         {"data", s.data},
                        {"pipeline", s.pipeline},             {"tensor", s.tensor},
                        {"tensor_mode", std::string(tensor_mode_name(s.mode))}, {"sequence", s.sequence},
                        {"ranks_per_node", s.ranks_per_node}};
  if (s.expert > 1) out["expert"] = s.expert;
  if (!gpu_collectives_.empty()) out["gpu_collectives"] = gpu_collectives_;
  return out;
}

}  // namespace tidal::parallel
