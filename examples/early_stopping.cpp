// A callback of one's own: early stopping on the eval loss. Training ends after an evaluation
// that has not bettered the best eval loss by at least `min_delta` for `patience` evaluations in
// a row; the trainer agrees the stop over every rank, writes the checkpoint (with
// checkpoint.dir set) and the final evaluation as at a normal end.
//
//   early_stopping [--patience N] [--min-delta D] [--metrics FILE] [section.key=value ...]
//   mpirun -np 4 early_stopping parallel.tensor.size=2 parallel.data=2 train.eval_every=50
#include "engine/launch.h"
#include "engine/trainer.h"

#include <fmt/format.h>

#include <limits>
#include <string>
#include <vector>

namespace {

class EarlyStopping final : public tidal::engine::Callback {
 public:
  EarlyStopping(int patience, double min_delta) : patience_(patience), min_delta_(min_delta) {}

  void on_evaluation(const tidal::engine::EvaluationEnd& e) override {
    if (e.eval_loss < best_ - min_delta_) {
      best_ = e.eval_loss;
      waited_ = 0;
    } else if (++waited_ >= patience_) {
      stop_ = true;
      stopped_at_ = e.step;
    }
  }
  bool should_stop() override { return stop_; }
  std::int64_t stopped_at() const { return stopped_at_; }
  double best() const { return best_; }

 private:
  int patience_;
  double min_delta_;
  double best_ = std::numeric_limits<double>::infinity();
  int waited_ = 0;
  bool stop_ = false;
  std::int64_t stopped_at_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  tidal::engine::Launch launch(&argc, &argv);
  return launch.run([&] {
    std::string metrics;
    int patience = 2;
    double min_delta = 0.0;
    std::vector<std::string> overrides;
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--metrics" && i + 1 < argc) metrics = argv[++i];
      else if (arg == "--patience" && i + 1 < argc) patience = std::stoi(argv[++i]);
      else if (arg == "--min-delta" && i + 1 < argc) min_delta = std::stod(argv[++i]);
      else overrides.push_back(arg);
    }
    const tidal::config::Config cfg = tidal::config::load_config("", overrides);
    tidal::engine::Trainer trainer(cfg, launch.context(cfg), {.metrics_path = metrics});
    EarlyStopping stopping(patience, min_delta);
    trainer.add_callback(stopping);
    const tidal::engine::TrainSummary s = trainer.fit();
    if (launch.is_main())
      fmt::print("early stopping: {} after {} of {} steps (best eval loss {:.4f}, final {:.4f})\n",
                 s.stopped_early ? fmt::format("stopped at the evaluation of step {}", stopping.stopped_at())
                                 : std::string("no stop"),
                 s.steps_done, cfg.train.steps, stopping.best(), s.final_loss);
  });
}
