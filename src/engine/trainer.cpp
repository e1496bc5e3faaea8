#include "engine/trainer.h"

#include "data/dataset.h"
#include "engine/checkpoint.h"
#include "engine/lr_schedule.h"
#include "engine/metrics.h"
#include "engine/progress.h"
#include "models/factory.h"
#include "nn/runner.h"
#include "ops/grad_norm.h"
#include "optim/adamw.h"

#include <chrono>
#include <cstdio>

namespace tidal::engine {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Mean loss over the fixed eval set (the first eval_batches batches of the eval split).
double evaluate(models::Model& model, const data::Dataset& dataset, nn::Runner& runner, const config::Config& cfg,
                std::int64_t micro) {
  double total = 0;
  for (std::int64_t i = 0; i < cfg.train.eval_batches; ++i) {
    const nn::Batch batch = dataset.batch(i * micro, micro, data::Split::eval);
    nn::StepState state{.runner = &runner, .training = false, .seed = cfg.train.seed, .batch = &batch};
    nn::Context ctx(state);
    total += model.run_forward(ctx).loss;
  }
  return total / double(cfg.train.eval_batches);
}

nlohmann::json layout_json(const config::Config& cfg) {
  return {{"world_size", 1},
          {"data", cfg.parallel.data},
          {"pipeline", cfg.parallel.pipeline},
          {"tensor", cfg.parallel.tensor.size},
          {"tensor_mode", cfg.parallel.tensor.mode},
          {"sequence", cfg.parallel.sequence}};
}

}  // namespace

TrainSummary train(const config::Config& cfg, const TrainOptions& options) {
  const config::TrainConfig& tc = cfg.train;
  Progress progress(stdout, std::max<std::int64_t>(1, tc.log_every));
  MetricsWriter metrics(options.metrics_path);
  auto dataset = data::make_dataset(cfg);
  auto model = models::make_model(cfg.model);
  model->materialize(tc.seed);
  optim::AdamW adam(model->parameters(), {.lr = float(tc.lr), .beta1 = float(tc.beta1), .beta2 = float(tc.beta2),
                                          .eps = 1e-8f, .weight_decay = float(tc.weight_decay)});
  const std::string config_toml = config::to_toml(cfg);

  std::int64_t start = 0;
  if (!options.resume_path.empty()) {
    const CheckpointInfo info = load_checkpoint(options.resume_path, adam);
    start = info.step;
    TIDAL_CHECK(start < tc.steps, "checkpoint '{}' is at step {}: nothing left to train up to train.steps = {}",
                info.path, start, tc.steps);
    progress.line(fmt::format("resumed from {} at step {}", info.path, start));
  }
  const std::int64_t B = tc.batch_size, micro = tc.micro_batch_size ? tc.micro_batch_size : B, accum = B / micro;
  // Positions per sample: tokens, or for ViT the patches and the class token.
  const std::int64_t T = cfg.model.type == "vit"
                             ? (cfg.model.image_size / cfg.model.patch_size) * (cfg.model.image_size / cfg.model.patch_size) + 1
                             : cfg.model.seq_len;
  const std::int64_t end = options.stop_after > 0 ? std::min(options.stop_after, tc.steps) : tc.steps;
  const LrSchedule schedule{tc.lr, tc.min_lr, tc.warmup_steps, tc.steps};
  const std::optional<double> floor = dataset->entropy_floor();

  progress.line(fmt::format("tidal: {} with {} parameters ({} layers, width {}, {} heads), batch {} x {} positions{}",
                            cfg.model.type, model->num_parameters(), cfg.model.n_layer, cfg.model.n_embd,
                            cfg.model.n_head, B, T, accum > 1 ? fmt::format(" in {} micro-batches", accum) : ""));
  progress.line("data: " + dataset->describe());

  nn::Runner runner;
  std::vector<Tensor> grads;
  for (nn::Parameter* p : model->parameters()) grads.push_back(p->grad);
  const std::int64_t warm = std::min<std::int64_t>(3, std::max<std::int64_t>(0, end - start - 1));
  double timed_seconds = 0, train_loss = 0;
  std::int64_t timed_steps = 0;
  const auto run_start = Clock::now();

  for (std::int64_t step = start; step < end; ++step) {
    const auto t0 = Clock::now();
    const double lr = schedule.at(step);
    adam.set_lr(float(lr));
    model->zero_grad();
    double loss = 0;
    for (std::int64_t m = 0; m < accum; ++m) {
      const nn::Batch batch = dataset->batch(step * B + m * micro, micro, data::Split::train);
      nn::StepState state{.runner = &runner, .training = true, .seed = tc.seed, .step = std::uint32_t(step),
                          .micro_batch = std::uint32_t(m), .batch = &batch};
      nn::Context ctx(state);
      loss += model->run_forward(ctx).loss / double(accum);
      model->run_backward(ctx, 1.0f / float(accum));
    }
    const double norm = tc.grad_clip > 0 ? ops::clip_grad_norm(grads, tc.grad_clip) : ops::global_norm(grads);
    adam.step();
    train_loss = loss;

    const double dt = seconds_since(t0);
    const double tokens_per_s = double(B * T) / dt;
    if (step - start >= warm) {
      timed_seconds += dt;
      ++timed_steps;
    }
    const double elapsed = seconds_since(run_start);
    const double eta = elapsed / double(step - start + 1) * double(end - step - 1);
    metrics.write({{"step", step + 1}, {"loss", loss}, {"lr", lr}, {"tokens_per_s", tokens_per_s}, {"grad_norm", norm},
                   {"step_time_s", dt}});
    progress.step({step + 1, tc.steps, loss, lr, tokens_per_s, eta, host_allocator().peak_bytes()});

    if (tc.eval_every > 0 && (step + 1) % tc.eval_every == 0 && step + 1 < tc.steps) {
      const double eval = evaluate(*model, *dataset, runner, cfg, micro);
      metrics.write({{"step", step + 1}, {"eval_loss", eval}});
      progress.line(fmt::format("step {}: eval loss {:.4f}{}", step + 1, eval,
                                floor ? fmt::format(" (floor {:.4f})", *floor) : ""));
    }
    const bool last = step + 1 == end;
    if (!cfg.checkpoint.dir.empty() &&
        (last || (cfg.checkpoint.every > 0 && (step + 1) % cfg.checkpoint.every == 0))) {
      save_checkpoint(cfg.checkpoint.dir, step + 1, adam, config_toml, cfg.checkpoint.keep);
      if (!last) progress.line(fmt::format("step {}: checkpoint written to {}", step + 1, cfg.checkpoint.dir));
    }
  }
  progress.finish();

  TrainSummary summary;
  summary.steps_done = end;
  summary.final_train_loss = train_loss;
  summary.final_loss = evaluate(*model, *dataset, runner, cfg, micro);
  summary.tokens_per_s = timed_steps ? double(timed_steps * B * T) / timed_seconds : 0.0;
  summary.entropy_floor = floor;
  nlohmann::json record = {{"summary", true},
                           {"completed", end == tc.steps},
                           {"steps", end},
                           {"final_loss", summary.final_loss},
                           {"final_train_loss", summary.final_train_loss},
                           {"tokens_per_s", summary.tokens_per_s},
                           {"parameters", model->num_parameters()},
                           {"peak_bytes", {{"host", host_allocator().peak_bytes()}}},
                           {"layout", layout_json(cfg)}};
  if (floor) record["entropy_floor"] = *floor;
  metrics.write(record);
  progress.line(fmt::format("done: {} steps, eval loss {:.4f}{}, {:.0f} tokens/s, peak host memory {}", end,
                            summary.final_loss,
                            floor ? fmt::format(" (entropy floor {:.4f}, gap {:.4f})", *floor, summary.final_loss - *floor) : "",
                            summary.tokens_per_s, human_bytes(host_allocator().peak_bytes())));
  if (!cfg.checkpoint.dir.empty()) progress.line(fmt::format("checkpoint: {}", cfg.checkpoint.dir));
  return summary;
}

}  // namespace tidal::engine
