// Training as a library: a Trainer holds one run - the dataset, the model (by model.type from
// the model registry, models/registry.h, so a user's own model trains under every layout), its
// pipeline engine and its model data - and trains it with micro-batches and gradient
// accumulation, gradient clipping, AdamW with warm-up + cosine learning rate, periodic eval,
// progress, metrics and checkpoints. Callbacks see every step's metrics, every evaluation and
// every checkpoint, and may end training early. `tidal train` is one user of it.
//
// A run interrupted at step k and resumed from its checkpoint computes bitwise the same losses as
// an uninterrupted one: data, dropout and init are pure functions of (seed, step, sample). With
// parallel.data = N each replica trains on its slice of every global batch and the gradients are
// summed during backward: the same computation as one process with the same batch.
#pragma once

#include "config/config.h"
#include "engine/callback.h"
#include "models/model.h"
#include "parallel/context.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace tidal::engine {

struct TrainOptions {
  std::string metrics_path = "";  // JSON lines; "" = none
  std::string resume_path = "";   // checkpoint to continue from; "" = fresh start (Trainer::load sets it too)
  std::int64_t stop_after = 0;  // end after this step as an interruption would (0 = run to train.steps)
  bool quiet = false;           // no progress lines (a probe run by another command)
  // false: a probe whose memory.device_limit is below what its warm-up traced goes on (the
  // summary's model_data reports the least cap each rank needs) instead of stopping.
  bool enforce_device_limit = true;
};

struct TrainSummary {
  std::int64_t steps_done = 0;
  bool stopped_early = false;   // a callback's should_stop ended training before train.steps
  double final_loss = 0;        // eval loss at the end
  double final_train_loss = 0;  // last step's training loss
  double tokens_per_s = 0;      // mean after the warm-up steps
  std::optional<double> entropy_floor;
  std::optional<double> allreduce_hidden_fraction;  // data parallel: share of all-reduce time behind backward
  nlohmann::json model_data;  // the model data's memory, as in the metrics summary (offload: the trace)
  nlohmann::json record;      // the summary record of the metrics
};

class Trainer {
 public:
  // Builds the run of `cfg` on the layout of `pc` (every rank of pc's world constructs one;
  // the main rank prints and writes files); the model data is laid out (and a checkpoint
  // loaded) at the first fit(), evaluate() or save().
  Trainer(const config::Config& cfg, parallel::ParallelContext& pc, TrainOptions options = {});
  // A single process (no launcher).
  explicit Trainer(const config::Config& cfg, TrainOptions options = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Not owned: it must outlive fit().
  void add_callback(Callback& callback);
  // Continue from checkpoint `dir` (a checkpoint directory or one of its step-* directories),
  // saved under any layout; before the first fit(), evaluate() or save().
  void load(const std::string& dir);
  // Trains from step() to train.steps (or options.stop_after, or a callback's stop), then
  // evaluates; returns the summary (also the metrics' last record).
  TrainSummary fit();
  // Mean loss over the valid targets of the fixed eval set (every rank calls it).
  double evaluate();
  // A checkpoint at step() into `dir` (every rank calls it; the main rank writes dir/step-<step>).
  void save(const std::string& dir);

  std::int64_t step() const;  // steps done
  models::Model& model();
  const config::Config& config() const;
  parallel::ParallelContext& context();

 private:
  struct Run;
  std::unique_ptr<parallel::ParallelContext> own_pc_;
  std::unique_ptr<Run> run_;
};

// Trainer(cfg, pc, options).fit().
TrainSummary train(const config::Config& cfg, const TrainOptions& options, parallel::ParallelContext& pc);
TrainSummary train(const config::Config& cfg, const TrainOptions& options);

}  // namespace tidal::engine
