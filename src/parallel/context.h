// ParallelContext: this rank's place in the mesh (Layout) and a communicator for every group it
// belongs to, each wrapped in a CountingCommunicator so metrics can report volume and time.
// Built once at start-up from [parallel] and the launched world, then passed explicitly to
// whatever communicates; never global. Groups of one rank get a SelfCommunicator, so a single
// process runs the same code as a parallel one.
#pragma once

#include "comm/counting_communicator.h"
#include "parallel/gpu_collectives.h"
#include "parallel/layout.h"

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <string>

namespace tidal::comm {
class MpiRuntime;
}

namespace tidal::parallel {

// The ranks a launcher started (1 for a null runtime, and in a build without MPI).
int launched_world_size(const comm::MpiRuntime* runtime);

// What a ParallelContext is built from (config/options.h makes it from a Config): the mesh
// [parallel] asks for, what the layout must fit, and how the groups communicate.
struct ContextOptions {
  // world_size is the launched world's (or the planned one's); ranks_per_node 0 = as the
  // launcher reports (one node when planned without it).
  MeshSpec mesh;
  // The model's shape the layout splits (num_classes: an image classifier's head, 0 for a
  // language model) and the global batch and micro-batch (0 = no accumulation), in samples.
  int n_layer = 1, n_head = 1, n_kv_head = 0;
  std::int64_t n_embd = 1, seq_len = 1, num_classes = 0;
  std::int64_t batch_size = 1, micro_batch_size = 0;
  double timeout_s = 300.0;  // a collective slower than this ends the job (the watchdog)
  bool on_gpu = false;       // the step computes on each rank's GPU (train.device = cuda)
  GpuCollectives gpu_collectives = GpuCollectives::automatic;
  // memory.offload's name when its device tier would claim a whole GPU's free memory (no
  // memory.device_limit); "" = no offload, or capped.
  std::string offload_without_limit;
};

class ParallelContext {
 public:
  // `runtime` is null for a process started without a launcher (world of one). Validates the
  // layout against the launched world and the model (tidal::Error naming the keys). Collective:
  // every rank constructs its context at the same point.
  ParallelContext(const ContextOptions& options, comm::MpiRuntime* runtime);
  // Rank `rank` of a world of `world_size` (`ranks_per_node` per node, 0 = one node) as the
  // cost model plans it (sim/): the same checks and groups, each a comm::PlanningCommunicator
  // that knows its members and never communicates. Not collective; nothing is launched.
  static ParallelContext planned(const ContextOptions& options, int world_size, int rank, int ranks_per_node = 0);

  const Layout& layout() const { return layout_; }
  int rank() const { return rank_; }
  int world_size() const { return layout_.world_size(); }
  const Coordinates& coordinates() const { return coords_; }
  bool is_main() const { return rank_ == 0; }  // prints progress, writes metrics and checkpoints

  // This rank's group of `kind` (a group of one where the kind does not split this layout).
  comm::Communicator& group(GroupKind kind);
  // A second communicator over the world's ranks (world rank order) for a thread of the rank's own
  // beside the training loop (a checkpoint's commit in the background): its operations are ordered
  // apart from the training's, so they never meet the loop's collectives. Host tensors only; not
  // counted in communication_stats() (nothing of a step's traffic).
  comm::Communicator& background() { return *background_; }
  // Volume and time per operation on each group so far, as JSON for metrics.
  nlohmann::json communication_stats() const;
  // Starts the counts of every group again from zero.
  void reset_communication_stats();
  // Every rank's integer figures `mine` ({key: value}, the same keys on every rank) as
  // {key_per_rank: [value of rank 0, 1, ...]}: one all-gather (a collective every rank calls alike).
  nlohmann::json per_rank(const nlohmann::json& mine);
  // {"world_size", "data", "pipeline", "tensor", "tensor_mode", "sequence", "ranks_per_node"}, and
  // "gpu_collectives" when GPU ranks communicate
  nlohmann::json describe() const;
  // How the groups move GPU tensors (parallel.gpu_collectives settled): "nccl", "staged", or ""
  // (host tensors only: a CPU run, or one process).
  const std::string& gpu_collectives() const { return gpu_collectives_; }

 private:
  ParallelContext(const ContextOptions& options, const MeshSpec& spec, int rank);

  Layout layout_;
  int rank_ = 0;
  Coordinates coords_;
  std::map<GroupKind, std::shared_ptr<comm::CountingCommunicator>> groups_;
  std::shared_ptr<comm::Communicator> background_;
  std::string gpu_collectives_;
};

// The mesh `options` ask for on `world_size` ranks with `ranks_per_node` (options.mesh's own when
// it gives one; 0 = unknown).
MeshSpec mesh_spec(const ContextOptions& options, int world_size, int ranks_per_node);

}  // namespace tidal::parallel
