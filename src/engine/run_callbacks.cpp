#include "engine/run_callbacks.h"

#include <fmt/format.h>

namespace tidal::engine {

StepLog::StepLog(Progress& progress, MetricsWriter& metrics, std::int64_t first, std::int64_t end, std::int64_t steps,
                 std::optional<double> floor, std::function<std::pair<std::uint64_t, std::uint64_t>()> peaks)
    : progress_(progress), metrics_(metrics), first_(first), end_(end), steps_(steps), floor_(floor),
      peaks_(std::move(peaks)) {}

void StepLog::on_step_end(const StepEnd& s) {
  metrics_.write(s.record);
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double eta = elapsed / double(s.step - first_) * double(end_ - s.step);
  const auto [host, activations] = peaks_();
  progress_.step({s.step, steps_, s.loss, s.lr, s.tokens_per_s, eta, host, activations});
}

void StepLog::on_evaluation(const EvaluationEnd& e) {
  metrics_.write({{"step", e.step}, {"eval_loss", e.eval_loss}});
  progress_.line(fmt::format("step {}: eval loss {:.4f}{}", e.step, e.eval_loss,
                             floor_ ? fmt::format(" (floor {:.4f})", *floor_) : ""));
}

PeriodicEvaluation::PeriodicEvaluation(std::int64_t every, std::int64_t steps, std::function<double()> evaluate,
                                       const std::vector<Callback*>& told)
    : every_(every), steps_(steps), evaluate_(std::move(evaluate)), told_(told) {}

void PeriodicEvaluation::on_step_end(const StepEnd& s) {
  if (every_ <= 0 || s.step % every_ != 0 || s.step >= steps_) return;
  const EvaluationEnd done{.step = s.step, .eval_loss = evaluate_()};
  for (Callback* c : told_) c->on_evaluation(done);
}

PeriodicSample::PeriodicSample(std::function<bool(std::int64_t)> due, std::function<std::string(std::int64_t)> line,
                               Progress& progress)
    : due_(std::move(due)), line_(std::move(line)), progress_(progress) {}

void PeriodicSample::on_step_end(const StepEnd& s) {
  if (!due_(s.step)) return;
  if (const std::string text = line_(s.step); !text.empty()) progress_.line(text);
}

PeriodicCheckpoint::PeriodicCheckpoint(std::int64_t every, std::function<void()> poll,
                                       std::function<void(std::int64_t)> save)
    : every_(every), poll_(std::move(poll)), save_(std::move(save)) {}

void PeriodicCheckpoint::on_step_end(const StepEnd& s) {
  poll_();  // a checkpoint written in the background committed once every rank's is
  if (every_ <= 0 || s.step % every_ != 0) return;
  save_(s.step);
  saved_ = s.step;
}

}  // namespace tidal::engine
