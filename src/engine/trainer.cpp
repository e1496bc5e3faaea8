#include "engine/trainer.h"

#include "core/gpu.h"
#include "data/dataset.h"
#include "config/hf_model.h"
#include "engine/checkpoint.h"
#include "engine/hf_checkpoint.h"
#include "engine/lr_schedule.h"
#include "engine/metrics.h"
#include "engine/model_data.h"
#include "engine/progress.h"
#include "engine/sampler.h"
#include "engine/step_profile.h"
#include "models/factory.h"
#include "nn/cross_entropy_loss.h"
#include "nn/runner.h"
#include "nn/parallel_layers.h"
#include "optim/loss_scaler.h"
#include "pipeline/engine.h"
#include "pipeline/stage_costs.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>

namespace tidal::engine {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// What model.init_from loaded, with every rank's copied bytes and peak host memory under several
// ranks (gathered over the world: every rank calls it).
std::string hf_load_line(const std::string& dir, const io::HfModelSpec& spec, const HfLoadReport& r,
                         parallel::ParallelContext& pc) {
  constexpr double kMiB = 1024.0 * 1024.0;
  std::string line = fmt::format("initialized from {} ({}): {} in its files, loaded in {:.2f} s", dir,
                                 io::hf_architecture(spec.family), human_bytes(r.file_bytes), r.seconds);
  constexpr int kFigures = 3;
  Tensor mine = Tensor::empty({kFigures}, DType::f32, host_allocator());
  mine.data<float>()[0] = float(double(r.copied_bytes) / kMiB);
  mine.data<float>()[1] = float(double(r.peak_rss_bytes) / kMiB);
  mine.data<float>()[2] = float(double(r.rss_before_bytes) / kMiB);
  const int n = pc.world_size();
  Tensor all = Tensor::empty({kFigures * n}, DType::f32, host_allocator());
  if (n > 1) pc.group(parallel::GroupKind::world).all_gather(all, mine)->wait();
  else all.copy_from(mine);
  for (int k = 0; k < n; ++k) {
    const float* f = all.data<float>() + kFigures * k;
    line += fmt::format("\n  {}copied {:.1f} MiB; peak host memory {:.1f} MiB ({:.1f} MiB before loading)",
                        n > 1 ? fmt::format("rank {}: ", k) : "", f[0], f[1], f[2]);
  }
  return line;
}

// The sum of a scalar over the data replicas (summed in fp32 across ranks).
double sum_over_replicas(parallel::ParallelContext& pc, double value) {
  if (pc.layout().spec().data == 1) return value;
  Tensor v = Tensor::empty({1}, DType::f32, host_allocator());
  v.data<float>()[0] = float(value);
  pc.group(parallel::GroupKind::data).all_reduce(v)->wait();
  return double(v.data<float>()[0]);
}


// Mean loss over the valid targets of the fixed eval set: samples [0, eval_batches * batch_size)
// of the eval split, whatever the layout. Each replica takes its slice of every batch, in
// micro-batches, and weighs each micro-batch's mean by its targets.
double evaluate(pipeline::PipelineEngine& engine, ModelData& model_data, const data::Dataset& dataset,
                nn::Runner& runner, const config::Config& cfg, std::int64_t micro, parallel::ParallelContext& pc,
                Allocator& activations) {
  const int replicas = pc.layout().spec().data, replica = pc.coordinates().data;
  const std::int64_t B = cfg.train.batch_size, local = B / replicas;
  double total = 0, targets = 0;
  for (std::int64_t i = 0; i < cfg.train.eval_batches; ++i) {
    for (std::int64_t first = replica * local; first < (replica + 1) * local; first += micro) {
      nn::Batch batch = dataset.batch(i * B + first, micro, data::Split::eval);
      const double count = double(nn::valid_targets(batch));
      std::optional<ScopedDefaultAllocator> on_gpu;  // the pass's temporaries beside its activations
      if (activations.device().is_cuda()) {
        batch = nn::copy_batch(batch, activations);
        on_gpu.emplace(activations);
      }
      nn::StepState state{
          .runner = &runner, .training = false, .seed = cfg.train.seed, .batch = &batch, .activations = &activations};
      total += engine.evaluate(state) * count;
      model_data.end_forward_only();
      targets += count;
    }
  }
  targets = sum_over_replicas(pc, targets);
  return targets > 0 ? sum_over_replicas(pc, total) / targets : 0.0;
}

nn::CheckpointPolicy checkpoint_policy(const config::TrainConfig& tc) {
  const int every = tc.activation_checkpointing == "blocks"    ? 1
                    : tc.activation_checkpointing == "every_k" ? tc.activation_checkpointing_k
                                                               : 0;
  return {.every = every, .offload_to_host = tc.activation_offload == "host"};
}

}  // namespace

TrainSummary train(const config::Config& cfg, const TrainOptions& options) {
  parallel::ParallelContext pc(cfg, nullptr);
  return train(cfg, options, pc);
}

TrainSummary train(const config::Config& cfg, const TrainOptions& options, parallel::ParallelContext& pc) {
  const config::TrainConfig& tc = cfg.train;
  Progress progress(pc.is_main() && !options.quiet ? stdout : nullptr, std::max<std::int64_t>(1, tc.log_every), pc.world_size() == 1);
  MetricsWriter metrics(pc.is_main() ? options.metrics_path : "");
  auto dataset = data::make_dataset(cfg);
  std::optional<TrainingSampler> sampler;  // train.sample_every: its prompt and tokenizer checked before training
  if (tc.sample_every > 0) sampler.emplace(cfg);
  const nn::CheckpointPolicy checkpointing = checkpoint_policy(tc);
  const auto layers = nn::make_layers(pc, {.keep_gathered = cfg.parallel.tensor.keep_gathered});
  auto model = models::make_model(cfg.model, checkpointing, *layers, cfg.memory.embedding_on_host);
  // Each data replica d takes samples [d * local, (d + 1) * local) of every global batch.
  const int replicas = pc.layout().spec().data, replica = pc.coordinates().data;
  const std::int64_t B = tc.batch_size, local = B / replicas;  // divisibility: ParallelContext
  const std::int64_t micro = tc.micro_batch_size ? tc.micro_batch_size : local, accum = local / micro;
  // The model's layers in pipeline stages (one stage without pipeline parallelism: the schedule
  // is then plain gradient accumulation); this rank holds its stage's parameters.
  const int stages = pc.layout().spec().pipeline;
  pipeline::PipelineOptions pipeline_options;
  pipeline_options.scatter_gather = cfg.parallel.scatter_gather;
  pipeline_options.schedule = pipeline::parse_schedule(cfg.parallel.schedule);
  pipeline_options.chunks = cfg.parallel.virtual_stages;
  if (stages > 1) {
    const auto by = pipeline::parse_partition(cfg.parallel.partition);
    HostAllocator probe_activations;
    const nn::Batch probe_batch = dataset->batch(replica * local, micro, data::Split::train);  // step 0's first
    const pipeline::TimeProbe probe{.state = {.training = true, .seed = tc.seed, .first_sample = replica * local,
                                              .batch = &probe_batch, .activations = &probe_activations},
                                    .world = &pc.group(parallel::GroupKind::world)};
    pipeline_options.unit_costs = pipeline::unit_costs(*model, by, &probe);
  }
  pipeline::PipelineEngine engine(*model, pc, pipeline_options);
  // Activations (and their gradients) have a pool of their own, so their peak is measured alone:
  // a share of the GPU's memory under train.device = "cuda"; under memory.offload a share of
  // the device tier, beside the chunks.
  const bool on_gpu = tc.device == "cuda";
  TIDAL_CHECK(!on_gpu || gpu_available(),
              "train.device = \"cuda\", but this process sees {}: run it where a GPU is visible (check "
              "CUDA_VISIBLE_DEVICES and nvidia-smi), or set train.device = \"cpu\"",
              gpu_description());
  std::unique_ptr<Allocator> activation_pool;
  if (on_gpu || cfg.memory.offload != "none")
    activation_pool = std::make_unique<SubAllocator>(device_tier(cfg));
  else
    activation_pool = std::make_unique<HostAllocator>();
  Allocator& activations = *activation_pool;
  nn::Runner runner;
  engine.materialize(tc.seed);  // on the host: the Philox init writes there
  std::string init_line;
  if (!cfg.model.init_from.empty() && options.resume_path.empty()) {
    const io::HfModelSpec spec = config::hf_spec(cfg.model);
    init_line = hf_load_line(cfg.model.init_from, spec, load_hf_weights(cfg.model.init_from, spec, engine.parameters()), pc);
  }
  const std::unique_ptr<ModelData> model_data = make_model_data(cfg, *model, engine, pc, runner, options.resume_path,
                                                                   options.enforce_device_limit);
  const std::string config_toml = config::to_toml(cfg);
  // fp16: dynamic loss scaling; the other precisions train unscaled.
  std::optional<optim::LossScaler> scaler;
  if (tc.precision == "fp16") scaler.emplace(optim::LossScalerOptions{.initial = tc.loss_scale, .window = tc.loss_scale_window});

  std::int64_t start = 0;
  if (const auto& info = model_data->resumed()) {
    start = info->step;
    TIDAL_CHECK(start < tc.steps, "checkpoint '{}' is at step {}: nothing left to train up to train.steps = {}",
                info->path, start, tc.steps);
    if (scaler && info->optimizer.loss_scale > 0)
      scaler->restore(info->optimizer.loss_scale, info->optimizer.loss_scale_good_steps);
    TIDAL_CHECK(options.stop_after == 0 || options.stop_after >= start,
                "--stop-after {} is before step {}, where checkpoint '{}' resumes: give a later step", options.stop_after,
                start, info->path);
    progress.line(fmt::format("resumed from {} at step {}", info->path, start));
  }
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
  if (!init_line.empty()) progress.line(init_line);

  if (replicas > 1) {
    progress.line(fmt::format("data parallel: {} replicas of {} sequences{}", replicas, local,
                              accum > 1 ? fmt::format(" ({} micro-batches)", accum) : ""));
  }
  if (const std::string line = model_data->describe(); !line.empty()) progress.line(line);
  if (scaler) progress.line(fmt::format("fp16: dynamic loss scale from {}", scaler->scale()));
  if (const int ring = pc.layout().spec().sequence; ring > 1) {
    progress.line(fmt::format("sequence parallel: a ring of {} ranks with {} positions each (ring self-attention), "
                              "gradients summed over {} ranks",
                              ring, T / ring, pc.group(parallel::GroupKind::data_sequence).size()));
  }
  if (stages > 1) {
    std::string split;
    for (std::size_t vs = 0; vs + 1 < engine.bounds().size(); ++vs)
      split += fmt::format("{}{}", vs ? " | " : "", engine.bounds()[vs + 1] - engine.bounds()[vs]);
    progress.line(fmt::format("pipeline: {} stages, schedule {}{}, layers per virtual stage {} (balanced by {}), {} "
                              "micro-batches{}",
                              stages, cfg.parallel.schedule,
                              engine.chunks() > 1 ? fmt::format(" ({} chunks per rank)", engine.chunks()) : "", split,
                              cfg.parallel.partition, accum,
                              engine.scatter_gather()
                                  ? fmt::format("; activations scatter-gathered over the {} tensor ranks",
                                                pc.layout().spec().tensor)
                                  : ""));
    if (cfg.parallel.partition != "layers") {
      std::string costs;
      const bool time = cfg.parallel.partition == "time";
      for (std::size_t vs = 0; vs < engine.stage_costs().size(); ++vs)
        costs += fmt::format("{}{:.{}f}", vs ? " | " : "", engine.stage_costs()[vs] * (time ? 1e3 : 1e-6), time ? 2 : 3);
      progress.line(fmt::format("pipeline: {} per virtual stage {}", time ? "measured ms (forward + backward of a "
                                                                          "micro-batch)" : "million parameters",
                                costs));
    }
  }
  const GradientReducer* reducer = model_data->reducer();
  std::int64_t skipped = 0;
  const std::int64_t warm = std::min<std::int64_t>(3, std::max<std::int64_t>(0, end - start - 1));
  double timed_seconds = 0, train_loss = 0, comm_seconds = 0, exposed_seconds = 0;
  std::int64_t timed_steps = 0;
  const auto run_start = Clock::now();

  auto save_checkpoint_at = [&](std::int64_t step) {
    const OptimizerMeta counters{.loss_scale = scaler ? scaler->scale() : 0.0,
                                 .loss_scale_good_steps = scaler ? scaler->good_steps() : 0};
    model_data->save(cfg.checkpoint.dir, step, counters, config_toml, cfg.checkpoint.keep);
  };

  // train.profile: the steps' op and module times; the timed steps' sum goes into the summary.
  StepProfile profile;
  StepProfile::Totals profile_sum;
  std::optional<ProfileRecording> recording;
  if (tc.profile) recording.emplace(profile);

  // An operator that ran out of the device tier: the model data keeper says how it uses it.
  try {
    for (std::int64_t step = start; step < end; ++step) {
      const auto t0 = Clock::now();
      profile.take();  // what ran between steps (evaluation, checkpoints) is no step's
      const double lr = schedule.at(step);
      model_data->zero_grad();
      const double loss_scale = scaler ? scaler->scale() : 1.0;
      std::vector<nn::Batch> batches;
      std::vector<double> targets;  // valid targets per micro-batch
      for (std::int64_t m = 0; m < accum; ++m) {
        batches.push_back(dataset->batch(step * B + replica * local + m * micro, micro, data::Split::train));
        targets.push_back(double(nn::valid_targets(batches.back())));
      }
      const double all_targets = sum_over_replicas(pc, std::accumulate(targets.begin(), targets.end(), 0.0));
      // On the GPU: the batch goes there, and the step's temporaries (gradients in flight,
      // workspaces) come from the activations' share of its memory until the update is done.
      std::optional<ScopedDefaultAllocator> step_on_gpu;
      if (on_gpu) {
        for (nn::Batch& b : batches) b = nn::copy_batch(b, activations);
        step_on_gpu.emplace(activations);
      }
      // The step's loss is the mean over the global batch's valid targets, as one process computes
      // it: a micro-batch's mean counts with its share of the targets.
      std::vector<pipeline::MicroBatch> micro_batches;
      for (std::int64_t m = 0; m < accum; ++m)
        micro_batches.push_back({.batch = &batches[std::size_t(m)],
                                 .first_sample = replica * local + m * micro,
                                 .loss_scale = float(all_targets > 0 ? targets[std::size_t(m)] / all_targets : 0.0),
                                 .gradient_scale = float(loss_scale)});
      const nn::StepState state{.runner = &runner, .training = true, .seed = tc.seed, .step = std::uint32_t(step),
                                .activations = &activations};
      double loss = engine.train(micro_batches, state, model_data->hooks(accum));
      model_data->finish_backward();
      if (replicas > 1) loss = sum_over_replicas(pc, loss);
      // The gradient carries the loss scale; its norm is not finite on every rank when it
      // overflowed on any (the norm is summed over them).
      const double norm = std::sqrt(model_data->squared_gradient_norm()) / loss_scale;
      const bool applied = scaler ? scaler->update(std::isfinite(norm)) : true;
      if (applied) {
        model_data->step(float(lr), float(loss_scale), norm, tc.grad_clip);
      } else {
        model_data->skip_step();
        ++skipped;
        progress.line(fmt::format("step {}: gradient overflowed in fp16 at loss scale {}: step skipped, scale now {}",
                                  step + 1, loss_scale, scaler->scale()));
      }
      step_on_gpu.reset();
      train_loss = loss;

      synchronize_gpu();  // the update's kernels count in the step's time
      const double dt = seconds_since(t0);
      const double tokens_per_s = double(B * T) / dt;
      if (step - start >= warm) {
        timed_seconds += dt;
        ++timed_steps;
        if (reducer) {
          comm_seconds += reducer->comm_seconds();
          exposed_seconds += reducer->exposed_seconds();
        }
      }
      const double elapsed = seconds_since(run_start);
      const double eta = elapsed / double(step - start + 1) * double(end - step - 1);
      nlohmann::json record = {{"step", step + 1},         {"loss", loss},      {"lr", lr},
                               {"tokens_per_s", tokens_per_s}, {"grad_norm", norm}, {"step_time_s", dt}};
      if (reducer) {
        record["allreduce_s"] = reducer->comm_seconds();
        record["allreduce_exposed_s"] = reducer->exposed_seconds();
      }
      if (scaler) {
        record["loss_scale"] = loss_scale;
        record["skipped"] = !applied;
      }
      if (tc.profile) {
        const StepProfile::Totals totals = profile.take();
        record["profile"] = profile_record(totals, dt, 1.0);
        if (step - start >= warm) accumulate_profile(profile_sum, totals);
      }
      record.update(model_data->step_record());
      metrics.write(record);
      progress.step({step + 1, tc.steps, loss, lr, tokens_per_s, eta, host_allocator().peak_bytes(),
                     activations.peak_bytes()});

      if (tc.eval_every > 0 && (step + 1) % tc.eval_every == 0 && step + 1 < tc.steps) {
        const double eval = evaluate(engine, *model_data, *dataset, runner, cfg, micro, pc, activations);
        metrics.write({{"step", step + 1}, {"eval_loss", eval}});
        progress.line(fmt::format("step {}: eval loss {:.4f}{}", step + 1, eval,
                                  floor ? fmt::format(" (floor {:.4f})", *floor) : ""));
      }
      if (sampler && sampler->due(step + 1, end)) {
        const std::string line = sampler->line(*model, pc.world_size(), step + 1);
        if (!line.empty()) progress.line(line);
      }
      const bool last = step + 1 == end;
      const bool due = last || (cfg.checkpoint.every > 0 && (step + 1) % cfg.checkpoint.every == 0);
      if (!cfg.checkpoint.dir.empty() && due) {
        save_checkpoint_at(step + 1);
        if (!last) progress.line(fmt::format("step {}: checkpoint written to {}", step + 1, cfg.checkpoint.dir));
      }
    }
    // Resumed with --stop-after at the checkpoint's own step: no step to run, and the checkpoint is
    // written again as this layout loaded it (a check that it loads under this layout).
    if (end == start && !cfg.checkpoint.dir.empty()) save_checkpoint_at(start);
  } catch (const OutOfMemory& e) {
    throw OutOfMemory(e.what() + model_data->out_of_memory_hint(e), e.needed());
  }
  progress.finish();
  recording.reset();

  TrainSummary summary;
  summary.steps_done = end;
  summary.final_train_loss = train_loss;
  summary.final_loss = evaluate(engine, *model_data, *dataset, runner, cfg, micro, pc, activations);
  summary.tokens_per_s = timed_steps ? double(timed_steps * B * T) / timed_seconds : 0.0;
  summary.entropy_floor = floor;
  summary.model_data = model_data->memory();
  nlohmann::json record = {{"summary", true},
                           {"completed", end == tc.steps},
                           {"steps", end},
                           {"final_loss", summary.final_loss},
                           {"final_train_loss", summary.final_train_loss},
                           {"tokens_per_s", summary.tokens_per_s},
                           {"parameters", model->num_parameters()},
                           {"peak_bytes", {{"host", host_allocator().peak_bytes()}, {"activations", activations.peak_bytes()}}},
                           {"activation_checkpointing", tc.activation_checkpointing},
                           {"precision", tc.precision},
                           {"zero_stage", cfg.zero.stage},
                           {"model_data", summary.model_data},
                           {"layout", pc.describe()},
                           {"communication", pc.communication_stats()}};
  if (floor) record["entropy_floor"] = *floor;
  if (scaler) {
    record["skipped_steps"] = skipped;
    record["loss_scale"] = scaler->scale();
  }
  if (reducer && comm_seconds > 0) {
    summary.allreduce_hidden_fraction = 1.0 - exposed_seconds / comm_seconds;
    record["allreduce_hidden_fraction"] = *summary.allreduce_hidden_fraction;
    record["allreduce_s_per_step"] = comm_seconds / double(timed_steps);
  }
  if (tc.profile && timed_steps > 0) record["profile"] = profile_record(profile_sum, timed_seconds, double(timed_steps));
  metrics.write(record);
  progress.line(fmt::format("done: {} steps, eval loss {:.4f}{}, {:.0f} tokens/s, peak host memory {} + activations {}",
                            end, summary.final_loss,
                            floor ? fmt::format(" (entropy floor {:.4f}, gap {:.4f})", *floor, summary.final_loss - *floor) : "",
                            summary.tokens_per_s, human_bytes(host_allocator().peak_bytes()),
                            human_bytes(activations.peak_bytes())));
  if (summary.allreduce_hidden_fraction) {
    progress.line(fmt::format("gradients: all-reduce over {} ranks {:.1f} ms per step, {:.0f}% of it hidden behind "
                              "backward",
                              replicas * pc.layout().spec().sequence, 1e3 * comm_seconds / double(timed_steps),
                              100 * *summary.allreduce_hidden_fraction));
  }
  if (record.contains("profile"))
    for (const std::string& line : profile_lines(record["profile"])) progress.line(line);
  if (!cfg.checkpoint.dir.empty()) progress.line(fmt::format("checkpoint: {}", cfg.checkpoint.dir));
  return summary;
}

}  // namespace tidal::engine
