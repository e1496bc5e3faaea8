// Checkpoints: a directory per step holding model.safetensors (the weights, with the step, the
// run's config and the layout in its metadata) and optimizer.safetensors (AdamW's moments).
// A step directory is written under a temporary name and renamed when complete; then the file
// `latest` is replaced atomically. A crash at any moment (kill -9 included) leaves the previous
// checkpoint loadable.
#pragma once

#include "comm/communicator.h"
#include "optim/adamw.h"

#include <cstdint>
#include <string>

namespace tidal::engine {

struct CheckpointInfo {
  std::int64_t step = 0;  // optimizer steps completed
  std::string config_toml;
  std::string path;  // the step directory read
};

// Saves into dir/step-<step>, points dir/latest at it, keeps the newest `keep` step directories.
// Tensors are saved whole, so a checkpoint loads under any tensor layout: with tensor
// parallelism every rank of `tensor_group` calls this (each parameter and its moments are
// gathered, nn/tp/shard.h) and only the `writer` writes.
void save_checkpoint(const std::string& dir, std::int64_t step, optim::AdamW& adam, const std::string& config_toml,
                     int keep, comm::Communicator* tensor_group = nullptr, bool writer = true);

// Loads `path` (a step directory, or a checkpoint directory and then its `latest`) into the
// optimizer's parameters and moments, each rank taking its block of every tensor. Every
// parameter must be present with its full shape.
CheckpointInfo load_checkpoint(const std::string& path, optim::AdamW& adam);

}  // namespace tidal::engine
