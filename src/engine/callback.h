// What a training run tells its callbacks (engine/trainer.h's Trainer::add_callback): each step's
// end with its metrics record, each evaluation, each committed checkpoint; and what it asks them,
// whether to stop. The run's own metrics, evaluation, samples and checkpoints are callbacks on this
// interface too (engine/run_callbacks.h).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace tidal::engine {

// The end of a training step: its metrics record as --metrics writes it (step, loss, lr,
// tokens_per_s, grad_norm, step_time_s, and what the run adds: loss_scale, allreduce_s, chunk
// moves, profile), the same on every rank where it is reduced over the ranks.
struct StepEnd {
  std::int64_t step;  // steps done, 1-based
  double loss, lr, grad_norm, tokens_per_s;
  const nlohmann::json& record;
};
struct EvaluationEnd {
  std::int64_t step;
  double eval_loss;
};
struct CheckpointSaved {
  std::int64_t step;
  std::string dir;  // checkpoint.dir (the checkpoint is its step-<step> directory)
};

// Every rank's callbacks run: the run's step log first, then the callbacks added, in the order they
// were added, then the run's evaluation (which tells every callback its result), samples and
// periodic checkpoints (engine/run_callbacks.h).
class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_step_end(const StepEnd&) {}
  virtual void on_evaluation(const EvaluationEnd&) {}
  virtual void on_checkpoint(const CheckpointSaved&) {}
  // Asked after each step's callbacks (and its evaluation's, when one was due): training ends
  // after that step (with a checkpoint when checkpoint.dir is set, and the final evaluation) when
  // any rank's callback says so; the answer is agreed over the world, so every rank stops at the
  // same step. Every rank adds the same callbacks (the agreement is a collective).
  virtual bool should_stop() { return false; }
};

}  // namespace tidal::engine
