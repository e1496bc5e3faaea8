// A training run's own callbacks (engine/callback.h), which Trainer::fit calls around the ones a
// user adds: the step log (the metrics record and the progress line of each step and evaluation),
// the periodic evaluation (train.eval_every), samples of generated text (train.sample_every) and
// periodic checkpoints (checkpoint.every; the last step's is fit's, after the loop).
#pragma once

#include "engine/callback.h"
#include "engine/metrics.h"
#include "engine/progress.h"

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tidal::engine {

// Each step's record to the metrics and a progress line (with the time left to `end`), each
// evaluation's too (beside the data's entropy floor, where it has one).
class StepLog final : public Callback {
 public:
  // `peaks`: the host's and the activation pool's peak bytes now.
  StepLog(Progress& progress, MetricsWriter& metrics, std::int64_t first, std::int64_t end, std::int64_t steps,
          std::optional<double> floor, std::function<std::pair<std::uint64_t, std::uint64_t>()> peaks);
  void on_step_end(const StepEnd& s) override;
  void on_evaluation(const EvaluationEnd& e) override;

 private:
  Progress& progress_;
  MetricsWriter& metrics_;
  const std::int64_t first_, end_, steps_;
  const std::optional<double> floor_;
  const std::function<std::pair<std::uint64_t, std::uint64_t>()> peaks_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// Every `every` steps before the last (whose evaluation is the run's summary): the eval loss,
// told to every callback in `told`.
class PeriodicEvaluation final : public Callback {
 public:
  PeriodicEvaluation(std::int64_t every, std::int64_t steps, std::function<double()> evaluate,
                     const std::vector<Callback*>& told);
  void on_step_end(const StepEnd& s) override;

 private:
  const std::int64_t every_, steps_;
  const std::function<double()> evaluate_;
  const std::vector<Callback*>& told_;
};

// A line of text the model generates, where `due` says (train.sample_every and the last step).
class PeriodicSample final : public Callback {
 public:
  PeriodicSample(std::function<bool(std::int64_t step)> due, std::function<std::string(std::int64_t step)> line,
                 Progress& progress);
  void on_step_end(const StepEnd& s) override;

 private:
  const std::function<bool(std::int64_t)> due_;
  const std::function<std::string(std::int64_t)> line_;
  Progress& progress_;
};

// Commits what was written in the background, and saves every `every` steps (0: only the run's
// last, which fit writes after the loop); `saved` is the last step saved.
class PeriodicCheckpoint final : public Callback {
 public:
  PeriodicCheckpoint(std::int64_t every, std::function<void()> poll, std::function<void(std::int64_t step)> save);
  void on_step_end(const StepEnd& s) override;
  std::optional<std::int64_t> saved() const { return saved_; }

 private:
  const std::int64_t every_;
  const std::function<void()> poll_;
  const std::function<void(std::int64_t)> save_;
  std::optional<std::int64_t> saved_;
};

}  // namespace tidal::engine
