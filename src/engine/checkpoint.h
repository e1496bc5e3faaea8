// Checkpoints: a directory per step holding model.safetensors (the weights, with the step, the
// run's config and the layout in its metadata) and optimizer.safetensors (AdamW's moments).
// A step directory is written under a temporary name and renamed when complete; then the file
// `latest` is replaced atomically. A crash at any moment (kill -9 included) leaves the previous
// checkpoint loadable.
#pragma once

#include "comm/communicator.h"
#include "config/config.h"
#include "io/safetensors.h"
#include "optim/adamw.h"

#include <cstdint>
#include <memory>
#include <string>

namespace tidal::engine {

// The optimizer file's counters.
struct OptimizerMeta {
  std::int64_t adamw_step = 0;  // updates applied (steps skipped on an fp16 overflow are not)
  double loss_scale = 0;        // fp16's dynamic loss scale; 0 = none
  std::int64_t loss_scale_good_steps = 0;
};

struct CheckpointInfo {
  std::int64_t step = 0;  // training steps completed
  std::string config_toml;
  std::string layout;  // the saving run's layout (ParallelContext::describe as JSON)
  std::string path;    // the step directory read
  OptimizerMeta optimizer;
};

// Pipeline parallelism: the first stage writes what every stage holds. sent_by[s] lists the
// parameters stage s > 0 sends it (those the first stage does not hold itself), in the same
// order on every rank of the group.
struct PipelineShare {
  comm::Communicator* group = nullptr;  // the pipeline group, ordered by stage
  std::vector<std::vector<const nn::Parameter*>> sent_by;
};

// Who takes part in a save besides this rank: with tensor parallelism every rank of `tensor`
// calls save_checkpoint (each parameter and its moments are gathered, nn/tp/shard.h); with
// pipeline parallelism every stage does, and the stages send their whole tensors to the first
// (tensor rank 0 of each stage sends). Only the `writer` (on the first stage) writes.
struct SaveGroups {
  comm::Communicator* tensor = nullptr;
  const PipelineShare* pipeline = nullptr;
  bool writer = true;
};

// This rank's block of a parameter (its tensor-parallel shard, or the whole) and its moments.
struct ParameterState {
  const nn::Parameter* param = nullptr;
  Tensor weight, momentum, variance;
};

// Saves into dir/step-<step>, points dir/latest at it, keeps the newest `keep` step directories.
// Tensors are saved whole, so a checkpoint loads under any layout; `layout` (the saving run's,
// as ParallelContext::describe) and the config are kept in the metadata. `local` lists this
// rank's parameters in the model's order, the same on every rank of the tensor group.
void save_checkpoint(const std::string& dir, std::int64_t step, const std::vector<ParameterState>& local,
                     const OptimizerMeta& meta, const std::string& config_toml, int keep,
                     const std::string& layout = "{}", const SaveGroups& groups = {});
// The optimizer's parameters and moments.
void save_checkpoint(const std::string& dir, std::int64_t step, optim::AdamW& adam, const std::string& config_toml,
                     int keep, const std::string& layout = "{}", const SaveGroups& groups = {});

// Writes whole tensors as save_checkpoint does: `weights` by parameter name, `moments` as
// "m.<name>" and "v.<name>".
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
void write_checkpoint(const std::string& dir, std::int64_t step, const NamedTensors& weights, const NamedTensors& moments,
                      const OptimizerMeta& meta, const std::string& config_toml, int keep, const std::string& layout);

// Loads `path` (a step directory, or a checkpoint directory and then its `latest`) into the
// optimizer's parameters and moments, each rank taking its block of every tensor. Every
// parameter must be present with its full shape.
CheckpointInfo load_checkpoint(const std::string& path, optim::AdamW& adam);

// The step directory `path` names: itself when it holds model.safetensors, else the one its
// `latest` file names. tidal::Error when it is neither.
std::string checkpoint_step_dir(const std::string& path);

// A checkpoint's format tag (its model.safetensors metadata "format").
inline constexpr const char* kCheckpointFormat = "tidal-checkpoint-1";

// A checkpoint's weights (model.safetensors, mapped: whole tensors by parameter name) and the
// config the run that saved them used, for readers other than resume (export, sampling).
struct StoredCheckpoint {
  std::string step_dir;
  std::unique_ptr<io::SafetensorsReader> weights;
  config::Config config;
};
// `path` as checkpoint_step_dir takes it; tidal::Error when it is not a tidal checkpoint.
StoredCheckpoint open_checkpoint(const std::string& path);

}  // namespace tidal::engine
