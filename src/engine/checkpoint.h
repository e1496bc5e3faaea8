// Checkpoints: a directory per step holding model.safetensors (the weights, with the step, the
// run's config and the layout in its metadata) and optimizer.safetensors (AdamW's moments).
// A step directory is written under a temporary name and renamed when complete; then the file
// `latest` is replaced atomically. A crash at any moment (kill -9 included) leaves the previous
// checkpoint loadable.
#pragma once

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
void save_checkpoint(const std::string& dir, std::int64_t step, optim::AdamW& adam,
                     const std::string& config_toml, int keep);

// Loads `path` (a step directory, or a checkpoint directory and then its `latest`) into the
// optimizer's parameters and moments. Every parameter must be present with its shape.
CheckpointInfo load_checkpoint(const std::string& path, optim::AdamW& adam);

}  // namespace tidal::engine
