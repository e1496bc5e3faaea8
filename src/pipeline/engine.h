// The pipeline engine (colossal-ai.txt sec. II-B-2): this rank's model chunks - contiguous runs
// of the model's layers (pipeline/partition.h, pipeline/stage_costs.h) - run a step's
// micro-batches in a schedule's order (pipeline/schedule.h). A forward takes the activation from
// the previous virtual stage (or the batch, on the first), a backward the gradient from the next
// (or the loss scale, on the last); results go on with non-blocking sends, and the receive the
// next action needs is posted before the current action computes, so transfers overlap compute
// both ways.
//
// Every rank builds the whole model but materializes only the parameters its chunks use. A tied
// embedding is used by the first stage (lookup) and the last (head): both hold it, and their
// gradients are summed over GroupKind::pipeline_ends before the optimizer step, so the copies
// stay equal (Megatron-LM's embedding group).
//
// Transfers between virtual stages vs and vs + 1: activations use tag 2 (vs + 1), gradients
// 2 vs + 1, so each stream is matched in order. In each train() / evaluate() the first message
// of a stream is preceded by a small header (shape and element type); the micro-batches of a
// call share one shape, so later receives know their size and are posted ahead.
//
// With 1D tensor parallelism the hidden state (and its gradient) is replicated over the tensor
// group: each tensor rank sends 1/t of it and the next stage all-gathers it over its tensor
// group (colossal-ai.txt Fig. 7), t times fewer bytes between stages. 2D, 2.5D and 3D send their
// shard, sequence parallelism its positions: already 1/t of the activation.
#pragma once

#include "models/model.h"
#include "parallel/context.h"
#include "pipeline/schedule.h"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <vector>

namespace tidal::pipeline {

struct MicroBatch {
  const nn::Batch* batch = nullptr;
  std::int64_t first_sample = 0;  // index of its first sample in the step's global batch
  float loss_scale = 1.0f;        // weight of its mean loss in the step's loss
  float gradient_scale = 1.0f;    // a further factor on its gradient only (fp16's dynamic loss scale)
};

struct PipelineOptions {
  std::vector<double> unit_costs;  // per unit (stage_costs.h); empty = its blocks (by layers)
  bool scatter_gather = true;      // 1D tensor parallelism: send 1/t, all-gather in the next stage
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  int chunks = 1;  // virtual stages per rank (interleaved)
  // ZB-H1: the W's each stage holds back (pipeline::held_weight_gradients; the run's are
  // sim::zero_bubble_holds'); empty = the paper's count, s at stage s.
  std::vector<int> held_weight_gradients;
};

// Called around the actions of train(): a gradient reducer arms itself for the last
// micro-batch; a chunk manager opens each forward pass (an earlier micro-batch's forward may have
// left its tensors HOLD_AFTER_FWD), closes it before the backward and completes the gradients.
// Under B and W (splits_backward) before_backward comes before a B and after_backward after its
// W: a micro-batch's gradients are complete only then.
struct ActionHooks {
  std::function<void(const Action&)> before_forward, before_backward, after_backward;
};

// Where one rank's time went in its last train() call.
struct StepProfile {
  double seconds = 0;          // the whole call, from entry until the pipeline's loss is known
  double compute_seconds = 0;  // forward and backward of its chunks
  // of which by action kind: forwards, backwards (or B's), and W passes (zero-bubble schedules)
  double forward_seconds = 0, backward_seconds = 0, weight_seconds = 0;
  double wait_seconds = 0;  // blocked on receives (and the scatter-gather all-gather)
  // of which before a forward (its activation) and before a backward or B (its gradient); a W
  // waits for nothing
  double forward_wait_seconds = 0, backward_wait_seconds = 0;
  // ZB-H1: the W's this rank held back (PipelineOptions::held_weight_gradients); -1 under the
  // other schedules.
  int held_weight_gradients = -1;
};

class PipelineEngine {
 public:
  PipelineEngine(models::Model& model, parallel::ParallelContext& pc, const PipelineOptions& options = {});

  // This rank's trained parameters (used by its chunks' layers), in the model's order: what the
  // optimizer, the gradient reductions and checkpoints hold.
  const std::vector<nn::Parameter*>& parameters() const { return params_; }
  // This rank's frozen parameters (nn::Parameter::frozen: a base under adapters), in the model's order.
  const std::vector<nn::Parameter*>& frozen_parameters() const { return frozen_; }
  // The trained parameters pipeline stage `stage` holds, in the model's order (the same on every rank).
  std::vector<nn::Parameter*> parameters_of(int stage) const;
  // The layers of this rank's chunks, in order.
  std::vector<nn::Module*> layers() const;
  // Per layers() entry, the model chunk that runs it.
  std::vector<int> layer_chunks() const;
  // Layer boundaries of the virtual stages: virtual stage vs runs layers [bounds[vs], bounds[vs+1]).
  const std::vector<int>& bounds() const { return bounds_; }
  // The summed unit costs of each virtual stage (PipelineOptions::unit_costs).
  const std::vector<double>& stage_costs() const { return stage_costs_; }
  int chunks() const { return chunks_; }
  // ZB-H1's W's held back per stage (empty: the paper's count).
  const std::vector<int>& held_weight_gradients() const { return held_; }
  // The virtual stage of this rank's model chunk `chunk` (pipeline/schedule.h), and the pipeline
  // rank holding a virtual stage.
  int virtual_stage(int chunk) const { return pipeline::virtual_stage(kind_, stages_, stage_, chunk); }
  int stage_of(int virtual_stage) const { return pipeline::stage_of(kind_, stages_, virtual_stage); }
  // Whether backwards run as B and W (pipeline/schedule.h): a parameter's gradient is complete
  // only after the step's last W, not its last backward.
  bool splits_backward() const { return pipeline::splits_backward(kind_); }
  bool scatter_gather() const { return scatter_gather_; }

  // Allocates and initialises this rank's trained parameters as Model::materialize does (a frozen
  // base is made by whoever holds it: engine/finetune.h's hold_frozen_base).
  void materialize(std::uint64_t seed, Allocator& alloc = host_allocator());
  void zero_grad();

  // Forward and backward of every micro-batch in the schedule's order. `state` gives the runner,
  // seed, step and allocator; each micro-batch its batch and first sample; `hooks` run around
  // each backward. Returns the sum of loss_scale x loss, on every rank of the pipeline.
  double train(const std::vector<MicroBatch>& micro_batches, const nn::StepState& state,
               const ActionHooks& hooks = {});
  const StepProfile& last_step() const { return profile_; }
  // The mean loss of one micro-batch, forward only, on every rank of the pipeline.
  double evaluate(const nn::StepState& state);

  // One action's work without its transfers: the layers of virtual stage vs forward from x (the
  // batch's input on the first), or backward from dy (the loss's gradient on the last). The
  // planner (sim/step_replay.h) runs them on meta tensors in the schedule's order.
  Tensor run_forward(int vs, Tensor x, nn::Context& ctx);
  Tensor run_backward(int vs, Tensor dy, nn::Context& ctx);

  // Whether another stage holds p too (a tied embedding at the ends).
  bool tied(const nn::Parameter& p) const { return tied_.count(const_cast<nn::Parameter*>(&p)) > 0; }
  // The model chunk of this rank whose layers use p (one of this rank's parameters); the first,
  // where both of ZB-V's use it (rank 0's tied table).
  int chunk_of(const nn::Parameter& p) const;
  // Sums the gradients of the parameters both end stages hold (tied embeddings) between them.
  void reduce_tied_gradients();
  // The squared gradient norm of the whole model: this rank's parameters (a tied one counted on
  // the first stage only; shards as nn::tp::squared_gradient_norm), summed over the pipeline.
  double squared_gradient_norm();

 private:
  // A transfer stream: the activations (from vs - 1) or the gradients (from vs + 1) into
  // virtual stage vs.
  struct Stream {
    int virtual_stage;
    bool gradient;
    auto operator<=>(const Stream&) const = default;
  };
  struct PendingReceive {
    Tensor buffer;
    comm::WorkPtr work;
  };
  Tensor receive(Stream s, Allocator& alloc);
  void post_receive(Stream s, Allocator& alloc);
  void send(const Tensor& t, Stream to);
  void begin_call();
  void finish_sends();
  // One train() call's micro-batches in flight.
  struct Call {
    const std::vector<MicroBatch>& micro_batches;
    std::vector<nn::StepState> states = {};  // per micro-batch
    const ActionHooks& hooks;
    Allocator& alloc;
    std::map<std::pair<int, int>, std::unique_ptr<nn::Context>> live = {};  // (micro-batch, chunk) -> its forward's context
    // (micro-batch, chunk) -> the weight gradients its B left for its W (zero-bubble schedules)
    std::map<std::pair<int, int>, nn::WeightGradients> weight_gradients = {};
    double loss = 0;  // of the micro-batches this rank ends, weighted
  };
  // The stream an action's input comes from, if it is received.
  std::optional<Stream> input_of(const Action& a) const;
  // This call's order.
  std::vector<Action> actions_of(int micro_batches);
  // A forward, a backward or B, and a W (the passes its micro-batch's B left), each timed.
  void forward_action(Call& call, const Action& a, const Tensor& input);
  void backward_action(Call& call, const Action& a, const Tensor& input);
  void weight_action(Call& call, const Action& a);
  int rank_of(int virtual_stage) const { return pipeline::stage_of(kind_, stages_, virtual_stage); }
  int tag_of(Stream s) const { return s.gradient ? 2 * s.virtual_stage + 1 : 2 * s.virtual_stage; }
  // The stage that sends on stream s.
  int source_of(Stream s) const { return rank_of(s.gradient ? s.virtual_stage + 1 : s.virtual_stage - 1); }
  // Elements of the message for a tensor of n elements: 1/t of it when scatter-gathering.
  std::int64_t payload_elements(std::int64_t n) const;

  models::Model& model_;
  parallel::ParallelContext& pc_;
  comm::Communicator& pipeline_;
  comm::Communicator& tensor_;
  ScheduleKind kind_;
  int stages_, stage_, chunks_;
  bool scatter_gather_;
  std::vector<int> bounds_;
  std::vector<double> stage_costs_;
  std::vector<nn::Parameter*> params_, frozen_;
  std::set<nn::Parameter*> tied_;  // held by another stage too
  std::map<const nn::Parameter*, int> chunk_of_;  // this rank's parameters' model chunks (the first)
  std::vector<comm::WorkPtr> sends_;
  // Per call: the shape of each stream this rank sends on and receives from (the first message
  // carries it), and receives posted ahead of the action that needs them.
  struct Message {
    Shape shape;
    DType dtype;
  };
  std::map<Stream, Message> sent_shapes_, received_shapes_;
  std::map<Stream, PendingReceive> pending_;
  std::map<Stream, Tensor> handed_;  // sent to this rank's next virtual stage (ZB-V's turn)
  std::vector<int> held_;             // ZB-H1's W's held back per stage (empty: the paper's count)
  StepProfile profile_;
};

}  // namespace tidal::pipeline
