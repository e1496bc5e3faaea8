// The pipeline engine (colossal-ai.txt sec. II-B-2): this rank's model chunks - contiguous runs
// of the model's layers (pipeline/partition.h) - run a step's micro-batches in a schedule's
// order (pipeline/schedule.h). A forward takes the activation from the previous virtual stage
// (or the batch, on the first), a backward the gradient from the next (or the loss scale, on the
// last); results go on with non-blocking sends, so a rank only waits for what it needs.
//
// Every rank builds the whole model but materializes only the parameters its chunks use. A tied
// embedding is used by the first stage (lookup) and the last (head): both hold it, and their
// gradients are summed over GroupKind::pipeline_ends before the optimizer step, so the copies
// stay equal (Megatron-LM's embedding group).
//
// Messages between virtual stages vs and vs + 1 carry a small shape header, then the tensor;
// activations use tag 2 (vs + 1), gradients 2 vs + 1, so each stream is matched in order.
#pragma once

#include "models/model.h"
#include "parallel/context.h"
#include "pipeline/schedule.h"

#include <functional>
#include <set>
#include <vector>

namespace tidal::pipeline {

struct MicroBatch {
  const nn::Batch* batch = nullptr;
  std::int64_t first_sample = 0;  // index of its first sample in the step's global batch
  float loss_scale = 1.0f;        // weight of its mean loss in the step's loss
};

class PipelineEngine {
 public:
  // Splits the model's transformer blocks evenly over parallel.pipeline x `chunks` virtual stages.
  PipelineEngine(models::Model& model, parallel::ParallelContext& pc, ScheduleKind kind, int chunks);

  // This rank's parameters (used by its chunks' layers), in the model's order.
  const std::vector<nn::Parameter*>& parameters() const { return params_; }
  // The layers of this rank's chunks, in order.
  std::vector<nn::Module*> layers() const;
  // Layer boundaries of the virtual stages (partition()).
  const std::vector<int>& bounds() const { return bounds_; }

  // Allocates and initialises this rank's parameters as Model::materialize does.
  void materialize(std::uint64_t seed, Allocator& alloc = host_allocator());
  void zero_grad();

  // Forward and backward of every micro-batch in the schedule's order. `state` gives the runner,
  // seed, step and allocator; each micro-batch its batch and first sample. before_backward, if
  // given, is called before each backward (a gradient reducer arms itself for the last
  // micro-batch). Returns the sum of loss_scale x loss, on every rank of the pipeline.
  double train(const std::vector<MicroBatch>& micro_batches, const nn::StepState& state,
               const std::function<void(const Action&)>& before_backward = {});
  int chunks() const { return chunks_; }
  // The mean loss of one micro-batch, forward only, on every rank of the pipeline.
  double evaluate(const nn::StepState& state);

  // Sums the gradients of the parameters both end stages hold (tied embeddings) between them.
  void reduce_tied_gradients();
  // The squared gradient norm of the whole model: this rank's parameters (a tied one counted on
  // the first stage only; shards as nn::tp::squared_gradient_norm), summed over the pipeline.
  double squared_gradient_norm();

 private:
  Tensor receive(int virtual_stage, bool gradient);
  void send(const Tensor& t, int virtual_stage, bool gradient);
  int rank_of(int virtual_stage) const { return virtual_stage % stages_; }
  // [begin, end) of the model's layers in virtual stage `vs`.
  Tensor run_forward(int vs, Tensor x, nn::Context& ctx);
  Tensor run_backward(int vs, Tensor dy, nn::Context& ctx);

  models::Model& model_;
  parallel::ParallelContext& pc_;
  comm::Communicator& pipeline_;
  ScheduleKind kind_;
  int stages_, stage_, chunks_;
  std::vector<int> bounds_;
  std::vector<nn::Parameter*> params_;
  std::set<nn::Parameter*> tied_;  // held by another stage too
  std::vector<comm::WorkPtr> sends_;
};

}  // namespace tidal::pipeline
