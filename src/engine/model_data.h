// The model data of a run - parameters, gradients and optimizer states (patrickstar-v2's term) -
// and what a training step does with it. Two keepers, which differ in how they store and never
// in which layouts they allow (both run under every data x pipeline x tensor x sequence layout):
// - tensors (fp32 at zero.stage 0 without offload): each parameter a fp32 tensor of its own with
//   AdamW; gradients all-reduced over the data (and sequence) ranks in buckets that overlap
//   backward (distributed/gradient_reducer.h). Kept beside the chunks because that overlap is the
//   fastest plain fp32 data parallelism, and fp32 tensors need no master copy.
// - chunks (everything else: bf16 / fp16 with fp32 master weights, ZeRO stages 1-3, offload):
//   PatrickStar's chunk lists (memory/chunk_manager.h) of the parameters this rank
//   materializes, shared and sharded by its data (x sequence) ranks; a grid's replicated blocks
//   and a pipeline's tied embedding in segments of their own, summed over their replicas after
//   backward; an interleaved pipeline's model chunks as phases of the lists.
// The trainer drives either the same way: zero_grad, the schedule with hooks(), finish_backward,
// the gradient norm, then step or skip_step.
#pragma once

#include "config/config.h"
#include "engine/checkpoint/checkpointer.h"
#include "memory/chunk_manager.h"
#include "nn/runner.h"
#include "parallel/context.h"
#include "pipeline/engine.h"

#include <memory>
#include <optional>
#include <string>

namespace tidal::engine {

class ModelData {
 public:
  virtual ~ModelData() = default;

  virtual void zero_grad() = 0;
  // Around the actions of the step's schedule of `micro_batches` (pipeline/engine.h).
  virtual pipeline::ActionHooks hooks(std::int64_t micro_batches) = 0;
  // After the schedule: the step's gradient complete where the optimizer reads it.
  virtual void finish_backward() = 0;
  // After a forward-only pass (evaluation).
  virtual void end_forward_only() {}
  // The squared norm of the step's whole gradient as held (times the loss scale), on every rank;
  // not finite when it overflowed anywhere.
  virtual double squared_gradient_norm() = 0;
  // The first of this rank's parameters whose gradient (as held) is not finite, or null.
  virtual const nn::Parameter* first_nonfinite_gradient() = 0;
  // AdamW from the gradient: `norm` is its true norm (loss scale divided out), clipped to
  // max_norm (0 = off); `gradient_scale` is the loss scale the held gradient carries.
  virtual void step(float lr, float gradient_scale, double norm, double max_norm) = 0;
  // A step whose gradient overflowed: no update, the gradient dropped.
  virtual void skip_step() = 0;
  virtual std::int64_t optimizer_steps() const = 0;

  // For a checkpoint (engine/checkpoint/checkpointer.h): each parameter block whose fp32 state this
  // rank keeps, with where its weight, momentum and variance lie now. They stay there unchanged
  // until the next step() or skip_step().
  virtual std::vector<HeldBlock> held_state() = 0;
  // The checkpoint resumed from, if any.
  const std::optional<CheckpointInfo>& resumed() const { return resumed_; }

  // A progress line on how the model data is kept and its gradients summed ("" = nothing to say).
  virtual std::string describe() const = 0;
  // The last step's gradient reductions over the data ranks (the metrics' allreduce_s and
  // allreduce_exposed_s): seconds in flight, the part of them the step stood waiting for, and
  // the collective's name; none where nothing is reduced (one data rank) or it is not timed.
  struct GradientReductionTime {
    double in_flight = 0, exposed = 0;
    std::string collective;
  };
  virtual std::optional<GradientReductionTime> gradient_reduction() const { return std::nullopt; }
  // Bytes of model data (params, gradients, optimizer states) at their peak, by list; empty for
  // the tensor keeper (its tensors live in the host allocator). Every rank calls it (the
  // per-rank figures are gathered).
  virtual nlohmann::json memory() const { return nlohmann::json::object(); }
  // Bytes of this rank's optimizer state: the fp32 master weights (the parameters themselves where
  // they are fp32 tensors), momentum and variance of the parameters it updates (a chunk list's
  // padding not counted; the lists' whole bytes are memory()'s).
  virtual std::int64_t optimizer_state_bytes() const = 0;
  // What to add to an out-of-memory error of the step (how this keeper uses the device tier).
  virtual std::string out_of_memory_hint(const OutOfMemory&) const { return ""; }
  // Keys for this step's metrics record (chunk moves under memory.offload, disk transfers under
  // memory.disk_dir), since the last call; every rank calls it (each rank's moves are gathered).
  virtual nlohmann::json step_record() { return nlohmann::json::object(); }

 protected:
  std::optional<CheckpointInfo> resumed_;
};

// The run's memory tiers by train.device: the device tier (the GPU's memory; without a GPU, host
// memory that memory.device_limit turns into a budget) and the host tier chunks move to
// (page-locked beside a GPU, so copies to and from it are asynchronous).
Allocator& device_tier(const config::Config& cfg);
Allocator& host_tier(const config::Config& cfg);

// Takes the parameters of this rank's stages (materialized on the host), loads `resume_path` if given, and hooks
// what needs the modules' hooks into `runner`. Under memory.offload the run stops after its
// warm-up when memory.device_limit is below the least cap any rank traced, unless not
// `enforce_device_limit` (a probe: memory() reports it).
std::unique_ptr<ModelData> make_model_data(const config::Config& cfg, models::Model& model,
                                           pipeline::PipelineEngine& engine, parallel::ParallelContext& pc,
                                           nn::Runner& runner, const std::string& resume_path,
                                           bool enforce_device_limit = true);

}  // namespace tidal::engine
