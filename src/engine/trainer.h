// The training loop: micro-batches with gradient accumulation, gradient clipping, AdamW with
// warm-up + cosine learning rate, periodic eval, progress, metrics and checkpoints. A run
// interrupted at step k and resumed from its checkpoint computes bitwise the same losses as an
// uninterrupted one: data, dropout and init are pure functions of (seed, step, sample). With
// parallel.data = N each replica trains on its slice of every global batch and the gradients
// are all-reduced during backward: the same computation as one process with the same batch.
#pragma once

#include "config/config.h"
#include "parallel/context.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace tidal::engine {

struct TrainOptions {
  std::string metrics_path = "";  // JSON lines; "" = none
  std::string resume_path = "";   // checkpoint to continue from; "" = fresh start
  std::int64_t stop_after = 0;  // end after this step as an interruption would (0 = run to train.steps)
  bool quiet = false;           // no progress lines (a probe run by another command)
  // false: a probe whose memory.device_limit is below what its warm-up traced goes on (the
  // summary's model_data reports the least cap each rank needs) instead of stopping.
  bool enforce_device_limit = true;
};

struct TrainSummary {
  std::int64_t steps_done = 0;
  double final_loss = 0;        // eval loss at the end
  double final_train_loss = 0;  // last step's training loss
  double tokens_per_s = 0;      // mean after the warm-up steps
  std::optional<double> entropy_floor;
  std::optional<double> allreduce_hidden_fraction;  // data parallel: share of all-reduce time behind backward
  nlohmann::json model_data;  // the model data's memory, as in the metrics summary (offload: the trace)
};

// Trains on the layout of `pc` (every rank calls it; the main rank prints and writes files).
TrainSummary train(const config::Config& cfg, const TrainOptions& options, parallel::ParallelContext& pc);
// A single process (no launcher).
TrainSummary train(const config::Config& cfg, const TrainOptions& options);

}  // namespace tidal::engine
