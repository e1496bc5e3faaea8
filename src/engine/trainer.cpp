#include "engine/trainer.h"

#include "config/options.h"
#include "core/bytes.h"
#include "core/gpu.h"
#include "core/process.h"
#include "data/data_options.h"
#include "engine/checkpoint/checkpointer.h"
#include "engine/expert_metrics.h"
#include "engine/finetune.h"
#include "engine/hf_checkpoint.h"
#include "engine/inference/sampler.h"
#include "engine/lr_schedule.h"
#include "engine/metrics.h"
#include "engine/planning/job.h"
#include "engine/model_data.h"
#include "engine/progress.h"
#include "engine/run_callbacks.h"
#include "engine/step_profile.h"
#include "memory/frozen_stream.h"
#include "models/factory.h"
#include "models/lora.h"
#include "models/registry.h"
#include "nn/cross_entropy_loss.h"
#include "nn/parallel_layers.h"
#include "nn/runner.h"
#include "optim/loss_scaler.h"
#include "pipeline/engine.h"
#include "pipeline/stage_costs.h"
#include "sim/cost_model.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string_view>

namespace tidal::engine {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// What model.init_from loaded, with every rank's copied bytes and peak host memory under several
// ranks (gathered over the world: every rank calls it).
std::string hf_load_line(const std::string& dir, const std::string& architecture, const HfLoadReport& r,
                         parallel::ParallelContext& pc) {
  constexpr double kMiB = 1024.0 * 1024.0;
  std::string line = fmt::format("initialized from {} ({}): {} in its files, loaded in {:.2f} s", dir,
                                 architecture, human_bytes(r.file_bytes), r.seconds);
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
double evaluate_loss(pipeline::PipelineEngine& engine, ModelData& model_data, const data::Dataset& dataset,
                     nn::Runner& runner, const config::Config& cfg, std::int64_t micro, parallel::ParallelContext& pc,
                     Allocator& activations) {
  const int replicas = pc.layout().spec().data, replica = pc.coordinates().data;
  const std::int64_t B = cfg.train.batch_size, local = B / replicas;
  double total = 0, targets = 0;
  for (std::int64_t i = 0; i < cfg.train.eval_batches; ++i) {
    for (std::int64_t first = replica * local; first < (replica + 1) * local; first += micro) {
      nn::Batch batch = dataset.batch(i * B + first, micro, data::Split::eval);
      const double count = double(nn::valid_targets(batch));
      if (activations.device().is_cuda()) batch = nn::copy_batch(batch, activations);
      ScopedDefaultAllocator temporaries(activations);  // the pass's temporaries beside its activations, as a step's
      nn::StepState state{.runner = &runner,
                          .training = false,
                          .seed = cfg.train.seed,
                          .batch = &batch,
                          .activations = &activations,
                          .attention = cfg.train.attention,
                          .fp8_linears = cfg.train.fp8};
      total += engine.evaluate(state) * count;
      model_data.end_forward_only();
      targets += count;
    }
  }
  targets = sum_over_replicas(pc, targets);
  return targets > 0 ? sum_over_replicas(pc, total) / targets : 0.0;
}

// This rank's communication between two ParallelContext::communication_stats(): per group and
// operation, the calls, elements, bytes sent, link bytes and seconds in between.
nlohmann::json communication_since(const nlohmann::json& before, const nlohmann::json& now) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [group, ops] : now.items())
    for (const auto& [op, figures] : ops.items()) {
      const nlohmann::json* then = before.contains(group) && before[group].contains(op) ? &before[group][op] : nullptr;
      if (then && then->at("calls") == figures.at("calls")) continue;  // nothing this step
      for (const char* key : {"calls", "elements"})
        out[group][op][key] = figures.at(key).get<std::int64_t>() - (then ? then->at(key).get<std::int64_t>() : 0);
      for (const char* key : {"bytes_sent", "link_bytes", "seconds"})
        out[group][op][key] = figures.at(key).get<double>() - (then ? then->at(key).get<double>() : 0.0);
    }
  return out;
}

// Where this rank's schedule went in one step: its actions, and waiting for inputs (pipeline > 1).
nlohmann::json pipeline_step_record(const pipeline::StepProfile& p) {
  nlohmann::json out = {{"seconds", p.seconds},
                        {"compute_s", p.compute_seconds},
                        {"forward_s", p.forward_seconds},
                        {"backward_s", p.backward_seconds},
                        {"weight_s", p.weight_seconds},
                        {"wait_s", p.wait_seconds},
                        {"forward_wait_s", p.forward_wait_seconds},
                        {"backward_wait_s", p.backward_wait_seconds}};
  if (p.held_weight_gradients >= 0) out["held_weight_gradients"] = p.held_weight_gradients;
  return out;
}

// Every rank's schedule over the timed steps (`sum`, microseconds): compute (forwards, backwards
// or B's, W passes) and waiting for inputs (before forwards, before backwards); the idle fraction
// is the ranks' mean of wait over the whole. `held`: ZB-H1's W's held back (-1: not counted).
nlohmann::json pipeline_run_record(parallel::ParallelContext& pc, const pipeline::StepProfile& sum, int held) {
  const auto us = [](double s) { return std::int64_t(s * 1e6); };
  nlohmann::json p = pc.per_rank({{"seconds_us", us(sum.seconds)},
                                  {"compute_us", us(sum.compute_seconds)},
                                  {"forward_us", us(sum.forward_seconds)},
                                  {"backward_us", us(sum.backward_seconds)},
                                  {"weight_us", us(sum.weight_seconds)},
                                  {"wait_us", us(sum.wait_seconds)},
                                  {"forward_wait_us", us(sum.forward_wait_seconds)},
                                  {"backward_wait_us", us(sum.backward_wait_seconds)}});
  double idle = 0;
  for (std::size_t r = 0; r < p["wait_us_per_rank"].size(); ++r)
    idle += p["wait_us_per_rank"][r].get<double>() / std::max(1.0, p["seconds_us_per_rank"][r].get<double>());
  p["idle_fraction"] = idle / double(p["wait_us_per_rank"].size());
  if (held >= 0) p.update(pc.per_rank({{"held_weight_gradients", held}}));
  return p;
}

// Every data replica's `mine` (as many on each), in replica order: the global batch's when each
// gives its slice (one all-gather over the data group; int64 in pairs of int32).
std::vector<std::int64_t> gather_over_replicas(parallel::ParallelContext& pc, const std::vector<std::int64_t>& mine) {
  comm::Communicator& data = pc.group(parallel::GroupKind::data);
  if (data.size() == 1) return mine;
  Tensor local = Tensor::empty({2 * std::int64_t(mine.size())}, DType::i32, host_allocator());
  std::memcpy(local.raw(), mine.data(), mine.size() * sizeof(std::int64_t));
  Tensor all = Tensor::empty({local.numel() * data.size()}, DType::i32, host_allocator());
  data.all_gather(all, local)->wait();
  std::vector<std::int64_t> out(mine.size() * std::size_t(data.size()));
  std::memcpy(out.data(), all.raw(), out.size() * sizeof(std::int64_t));
  return out;
}

// A scalar agreed over the world: the largest of every rank's (1 = a rank wants to stop).
bool any_rank(parallel::ParallelContext& pc, bool mine) {
  if (pc.world_size() == 1) return mine;
  Tensor v = Tensor::empty({1}, DType::f32, host_allocator());
  v.data<float>()[0] = mine ? 1.0f : 0.0f;
  pc.group(parallel::GroupKind::world).all_reduce(v)->wait();
  return v.data<float>()[0] > 0.0f;
}

// The run's pipeline options: the schedule, and under a pipeline the stage partition's unit
// costs (measured on step 0's first micro-batch when parallel.partition = "time").
pipeline::PipelineOptions pipeline_options(const config::Config& cfg, models::Model& model, const data::Dataset& data,
                                           parallel::ParallelContext& pc, std::int64_t first, std::int64_t micro) {
  pipeline::PipelineOptions o;
  o.scatter_gather = cfg.parallel.scatter_gather;
  o.schedule = cfg.parallel.schedule;
  o.chunks = cfg.parallel.virtual_stages;
  o.held_weight_gradients = sim::zero_bubble_holds(job_of(cfg), pc.world_size());
  if (pc.layout().spec().pipeline > 1) {
    HostAllocator probe_activations;
    const nn::Batch probe_batch = data.batch(first, micro, data::Split::train);
    const pipeline::TimeProbe probe{.state = {.training = true, .seed = cfg.train.seed, .first_sample = first,
                                              .batch = &probe_batch, .activations = &probe_activations},
                                    .world = &pc.group(parallel::GroupKind::world)};
    o.unit_costs = pipeline::unit_costs(model, cfg.parallel.partition, &probe);
  }
  return o;
}

// Activations (and their gradients) have a pool of their own, so their peak is measured alone:
// a share of the GPU's memory under train.device = "cuda"; under memory.offload a share of the
// device tier, beside the chunks.
std::unique_ptr<Allocator> activation_pool(const config::Config& cfg) {
  const bool on_gpu = cfg.train.device == Device::Kind::cuda;
  TIDAL_CHECK(!on_gpu || gpu_available(),
              "train.device = \"cuda\", but this process sees {}: run it where a GPU is visible (check "
              "CUDA_VISIBLE_DEVICES and nvidia-smi), or set train.device = \"cpu\"",
              gpu_description());
  TIDAL_CHECK(!cfg.train.fp8 || gpu_compute_capability() >= 89,
              "train.precision = \"fp8\" needs a GPU with fp8 tensor cores (compute capability 8.9 or more: Ada, "
              "Hopper, Blackwell), and this process sees {}: set train.precision = \"bf16\"",
              gpu_description());
  if (on_gpu || cfg.memory.offload != config::Offload::none) return std::make_unique<SubAllocator>(device_tier(cfg));
  return std::make_unique<HostAllocator>();
}

}  // namespace

// One run's state: what the constructor builds, and what prepare() adds before the first use.
struct Trainer::Run {
  Run(const config::Config& c, parallel::ParallelContext& p, TrainOptions o)
      : cfg(c),
        options(std::move(o)),
        pc(p),
        progress(pc.is_main() && !options.quiet ? stdout : nullptr, std::max<std::int64_t>(1, cfg.train.log_every),
                 pc.world_size() == 1),
        metrics(pc.is_main() ? options.metrics_path : "", pc.is_main() ? cfg.train.tensorboard_dir : ""),
        dataset(data::make_dataset(config::data_options(cfg))),
        layers(nn::make_layers(pc, {.keep_gathered = cfg.parallel.tensor.keep_gathered})),
        model(build_model(cfg, *layers)),
        replicas(pc.layout().spec().data),
        replica(pc.coordinates().data),
        B(cfg.train.batch_size),
        local(B / replicas),  // divisibility: ParallelContext
        micro(cfg.train.micro_batch_size ? cfg.train.micro_batch_size : local),
        accum(local / micro),
        T(models::positions_per_sample(cfg.model)),
        mixture(models::model_traits(cfg.model).experts),
        activations(activation_pool(cfg)),
        engine(*model, pc, pipeline_options(cfg, *model, *dataset, pc, replica * local, micro)),
        schedule{cfg.train.lr, cfg.train.min_lr, cfg.train.warmup_steps, cfg.train.steps},
        floor(dataset->entropy_floor()) {
    if (cfg.train.sample_every > 0) sampler.emplace(cfg);  // its prompt and tokenizer checked before training
    engine.materialize(cfg.train.seed);  // on the host: the Philox init writes there
    // fp16: dynamic loss scaling; the other precisions train unscaled.
    if (cfg.train.precision == DType::f16)
      scaler.emplace(optim::LossScalerOptions{.initial = cfg.train.loss_scale, .window = cfg.train.loss_scale_window});
  }

  void prepare();
  void describe_layout();
  // A committed checkpoint: its metrics record, a progress line, the callbacks.
  void checkpoint_written(const nlohmann::json& record);
  // One training step (0-based `step`): its metrics record.
  nlohmann::json train_step(std::int64_t step);
  // What was not finite in step `at`: the loss, or the first of this rank's parameters whose
  // gradient is not; and the whole message of a run that stops there.
  // A step whose gradient is not finite (train.on_nonfinite, the fp16 loss scaler): no update,
  // counted, stopped where the config says.
  void skip_step(std::int64_t at, double loss, double norm, double loss_scale);
  std::string what_is_not_finite(double loss, double norm);
  std::string diverged(std::int64_t at, double loss, double norm);
  double evaluate();
  // A checkpoint of `at` steps done.
  void save(const std::string& dir, std::int64_t at);
  // Step `at`'s metrics record (its profile, the model data's moves, the peaks); a step after the
  // warm-up counts in the run's timed mean.
  nlohmann::json step_record(std::int64_t at, bool timed);
  // Whether a callback asks to stop, agreed over the world.
  bool agreed_stop();
  TrainSummary fit();
  TrainSummary summarize(std::int64_t end, bool stopped_early);

  config::Config cfg;
  TrainOptions options;
  parallel::ParallelContext& pc;
  Progress progress;
  MetricsWriter metrics;
  std::unique_ptr<data::Dataset> dataset;
  std::unique_ptr<nn::LayerFactory> layers;
  std::unique_ptr<models::Model> model;
  // Each data replica takes samples [replica * local, (replica + 1) * local) of every global
  // batch of B, in `accum` micro-batches of `micro`.
  int replicas, replica;
  std::int64_t B, local, micro, accum, T;
  int mixture;  // experts in each block's mixture (models::ModelTraits); 0 = none
  // Where a step's activations live: made before (so gone after) the engine, whose micro-batch
  // contexts still hold some when a step ends in an error.
  std::unique_ptr<Allocator> activations;
  // The model's layers in pipeline stages (one stage without pipeline parallelism: the schedule
  // is then plain gradient accumulation); this rank holds its stage's parameters.
  pipeline::PipelineEngine engine;
  nn::Runner runner;
  std::optional<TrainingSampler> sampler;
  std::optional<optim::LossScaler> scaler;
  LrSchedule schedule;
  std::optional<double> floor;
  // finetune.base_offload = "host" or "disk": the frozen base there, each module's weights fetched as it runs.
  std::unique_ptr<memory::FrozenBaseStream> base_stream;
  std::unique_ptr<ModelData> model_data;  // made by prepare()
  // Checkpoints (engine/checkpoint/checkpointer.h); declared after the model data, so it goes
  // first: a write in flight never outlives the state it reads.
  std::unique_ptr<Checkpointer> checkpointer;
  std::vector<Callback*> callbacks;
  std::int64_t step = 0;  // steps done
  std::int64_t skipped = 0, skipped_in_a_row = 0;
  double train_loss = 0, comm_seconds = 0, exposed_seconds = 0, timed_seconds = 0;
  std::int64_t timed_steps = 0;  // steps after the warm-up, whose mean the summary gives
  pipeline::StepProfile pipeline_sum;  // this rank's schedule over the timed steps (pipeline > 1)
  StepProfile profile;
  StepProfile::Totals profile_sum;
};

void Trainer::Run::prepare() {
  if (model_data) return;
  std::string init_line;
  // Under adapters the checkpoint holds them alone: the base comes from model.init_from again.
  const bool adapters = cfg.finetune.method == config::FinetuneMethod::lora;
  std::optional<HfLoadReport> loaded;
  if (adapters) {
    HeldBase base = hold_frozen_base(cfg, engine.frozen_parameters(), pc.rank());
    loaded = std::move(base.loaded);
    base_stream = std::move(base.stream);
    if (base_stream) runner.add_hooks(base_stream.get());
  } else if (!cfg.model.init_from.empty() && options.resume_path.empty()) {
    loaded = load_hf_weights(cfg.model.init_from, cfg.model, engine.parameters());
  }
  if (loaded) init_line = hf_load_line(cfg.model.init_from, models::hf_adapter(cfg.model).architecture, *loaded, pc);
  std::string adapters_line;
  if (adapters && options.resume_path.empty() && !cfg.finetune.adapters_from.empty())
    adapters_line = load_peft_adapters(cfg.finetune.adapters_from, cfg, engine.parameters());
  model_data = make_model_data(cfg, *model, engine, pc, runner, options.resume_path, options.enforce_device_limit);
  checkpointer = std::make_unique<Checkpointer>(
      CheckpointOptions{.keep = cfg.checkpoint.keep,
                        .async = cfg.checkpoint.async == config::Toggle::on ||
                                 (cfg.checkpoint.async == config::Toggle::automatic && pc.world_size() > 1),
                        .buffer_bytes = config::parse_bytes(cfg.checkpoint.buffer_size, "checkpoint.buffer_size")},
      pc.group(parallel::GroupKind::world), pc.background(), host_tier(cfg),
      [this](const nlohmann::json& record) { checkpoint_written(record); });
  if (const auto& info = model_data->resumed()) {
    step = info->step;
    TIDAL_CHECK(step < cfg.train.steps,
                "checkpoint '{}' is at step {}: nothing left to train up to train.steps = {}", info->path, step,
                cfg.train.steps);
    if (scaler && info->optimizer.loss_scale > 0)
      scaler->restore(info->optimizer.loss_scale, info->optimizer.loss_scale_good_steps);
    TIDAL_CHECK(options.stop_after == 0 || options.stop_after >= step,
                "--stop-after {} is before step {}, where checkpoint '{}' resumes: give a later step", options.stop_after,
                step, info->path);
    progress.line(fmt::format("resumed from {} at step {}", info->path, step));
  }
  progress.line(fmt::format("tidal: {} with {} parameters ({} layers, width {}, {} heads), batch {} x {} positions{}",
                            cfg.model.type, model->num_parameters(), cfg.model.n_layer, cfg.model.n_embd,
                            cfg.model.n_head, B, T, accum > 1 ? fmt::format(" in {} micro-batches", accum) : ""));
  if (adapters)
    progress.line(fmt::format("LoRA: {} parameters trained, rank {} adapters on {}; the base frozen in {}",
                              model->num_parameters(true), cfg.finetune.lora_rank,
                              fmt::join(models::lora_targets(cfg.model, cfg.finetune.lora_targets), ", "),
                              cfg.finetune.base_dtype == config::BaseDType::nf4
                                  ? fmt::format("NF4 (its linears; the rest in {})", config::name_of(cfg.train.precision))
                                  : std::string(config::name_of(cfg.train.precision))));
  progress.line("data: " + dataset->describe());
  if (!init_line.empty()) progress.line(init_line);
  if (!adapters_line.empty()) progress.line(adapters_line);
  describe_layout();
}

void Trainer::Run::describe_layout() {
  if (pc.gpu_collectives() == "staged")
    progress.line("collectives: MPI, with the GPU's tensors staged through pinned host memory");
  if (pc.gpu_collectives() == "nccl")
    progress.line("collectives: NCCL between the GPUs (host tensors and send / recv over MPI)");
  if (replicas > 1) {
    progress.line(fmt::format("data parallel: {} replicas of {} sequences{}", replicas, local,
                              accum > 1 ? fmt::format(" ({} micro-batches)", accum) : ""));
  }
  if (const int experts = pc.layout().spec().expert; experts > 1)
    progress.line(fmt::format("expert parallel: groups of {} data ranks, each rank {} of the {} experts of every "
                              "mixture, rows to their experts' ranks and back by all-to-all",
                              experts, mixture / experts, mixture));
  if (const std::string line = model_data->describe(); !line.empty()) progress.line(line);
  if (scaler) progress.line(fmt::format("fp16: dynamic loss scale from {}", scaler->scale()));
  if (const parallel::MeshSpec& spec = pc.layout().spec(); spec.sequence > 1) {
    const int ring = spec.sequence;
    const std::string how = spec.sequence_mode == parallel::SequenceMode::ulysses
                                ? "Ulysses: an all-to-all of heads around attention"
                                : "ring self-attention";
    progress.line(fmt::format("sequence parallel: a ring of {} ranks with {} positions each{} ({}), gradients summed "
                              "over {} ranks",
                              ring, T / ring, spec.sequence_zigzag ? " in two zig-zag chunks" : "", how,
                              pc.group(parallel::GroupKind::data_sequence).size()));
  }
  const int stages = pc.layout().spec().pipeline;
  if (stages == 1) return;
  std::string split;
  for (std::size_t vs = 0; vs + 1 < engine.bounds().size(); ++vs)
    split += fmt::format("{}{}", vs ? " | " : "", engine.bounds()[vs + 1] - engine.bounds()[vs]);
  std::string held;
  if (cfg.parallel.schedule == pipeline::ScheduleKind::zb_h1)
    held = engine.held_weight_gradients().empty()
               ? " (stage s holds its last s W's back, the paper's count)"
               : fmt::format(" (W's held back per stage {}: within {} x 1F1B's activations, parallel.zb_memory)",
                             fmt::join(engine.held_weight_gradients(), " | "), cfg.parallel.zb_memory);
  progress.line(fmt::format(
      "pipeline: {} stages, schedule {}{}{}, layers per virtual stage {} (balanced by {}), {} micro-batches{}", stages,
      cfg.parallel.schedule, held, engine.chunks() > 1 ? fmt::format(" ({} chunks per rank)", engine.chunks()) : "", split,
      cfg.parallel.partition, accum,
      engine.scatter_gather()
          ? fmt::format("; activations scatter-gathered over the {} tensor ranks", pc.layout().spec().tensor)
          : ""));
  if (cfg.parallel.partition == pipeline::PartitionBy::layers) return;
  std::string costs;
  const bool time = cfg.parallel.partition == pipeline::PartitionBy::time;
  for (std::size_t vs = 0; vs < engine.stage_costs().size(); ++vs)
    costs += fmt::format("{}{:.{}f}", vs ? " | " : "", engine.stage_costs()[vs] * (time ? 1e3 : 1e-6), time ? 2 : 3);
  progress.line(fmt::format("pipeline: {} per virtual stage {}",
                            time ? "measured ms (forward + backward of a micro-batch)" : "million parameters", costs));
}

nlohmann::json Trainer::Run::train_step(std::int64_t at) {
  const auto t0 = Clock::now();
  const nlohmann::json communication_before = pc.world_size() > 1 ? pc.communication_stats() : nlohmann::json();
  const double lr = schedule.at(at);
  model_data->zero_grad();
  const double loss_scale = scaler ? scaler->scale() : 1.0;
  std::vector<nn::Batch> batches;
  std::vector<double> targets;  // valid targets per micro-batch
  const auto reading = Clock::now();
  for (std::int64_t m = 0; m < accum; ++m) {
    batches.push_back(dataset->batch(at * B + replica * local + m * micro, micro, data::Split::train));
    targets.push_back(double(nn::valid_targets(batches.back())));
  }
  const double data_seconds = seconds_since(reading);
  // train.log_samples: the samples each replica read, gathered in the global batch's order.
  const std::vector<std::int64_t> sample_ids =
      cfg.train.log_samples ? gather_over_replicas(pc, dataset->sample_ids(at * B + replica * local, local))
                            : std::vector<std::int64_t>();
  const double all_targets = sum_over_replicas(pc, std::accumulate(targets.begin(), targets.end(), 0.0));
  // The step's temporaries (gradients in flight, communication buffers, workspaces) come from the
  // activations' pool until the update is done, on every device: its peak is the step's whole
  // non-model memory, the figure the cost model predicts (sim/activations.h). On the GPU the
  // batch goes there too.
  if (cfg.train.device == Device::Kind::cuda)
    for (nn::Batch& b : batches) b = nn::copy_batch(b, *activations);
  std::optional<ScopedDefaultAllocator> step_temporaries(std::in_place, *activations);
  // The step's loss is the mean over the global batch's valid targets, as one process computes
  // it: a micro-batch's mean counts with its share of the targets.
  std::vector<pipeline::MicroBatch> micro_batches;
  for (std::int64_t m = 0; m < accum; ++m)
    micro_batches.push_back({.batch = &batches[std::size_t(m)],
                             .first_sample = replica * local + m * micro,
                             .loss_scale = float(all_targets > 0 ? targets[std::size_t(m)] / all_targets : 0.0),
                             .gradient_scale = float(loss_scale)});
  nn::ExpertRecord experts;
  const nn::StepState state{.runner = &runner, .training = true, .seed = cfg.train.seed, .step = std::uint32_t(at),
                            .activations = activations.get(), .experts = &experts, .attention = cfg.train.attention,
                            .fp8_linears = cfg.train.fp8};
  double loss = engine.train(micro_batches, state, model_data->hooks(accum));
  model_data->finish_backward();
  if (replicas > 1) loss = sum_over_replicas(pc, loss);
  // The gradient carries the loss scale; its norm is not finite on every rank when it
  // overflowed on any (the norm is summed over them), so every rank takes the same branch.
  const double norm = std::sqrt(model_data->squared_gradient_norm()) / loss_scale;
  const bool finite = std::isfinite(loss) && std::isfinite(norm);
  // A step that is not finite never updates the weights. Under fp16 an overflow is the loss
  // scaler's to handle (it backs off); in fp32 and bf16 it means the run diverged.
  const bool applied = scaler ? scaler->update(finite) : finite;
  checkpointer->before_update();  // a checkpoint still reading the state where it lies
  if (applied) {
    model_data->step(float(lr), float(loss_scale), norm, cfg.train.grad_clip);
    skipped_in_a_row = 0;
  } else {
    skip_step(at, loss, norm, loss_scale);
  }
  step_temporaries.reset();
  train_loss = loss;
  synchronize_gpu();  // the update's kernels count in the step's time
  const double dt = seconds_since(t0);
  nlohmann::json record = {{"step", at + 1},
                           {"loss", loss},
                           {"lr", lr},
                           {"tokens_per_s", double(B * T) / dt},
                           {"grad_norm", norm},
                           {"step_time_s", dt},
                           {"data_s", data_seconds}};
  if (const auto reduction = model_data->gradient_reduction()) {
    record["allreduce_s"] = reduction->in_flight;
    record["allreduce_exposed_s"] = reduction->exposed;
  }
  if (scaler) {
    record["loss_scale"] = loss_scale;
    record["skipped"] = !applied;
  }
  if (mixture > 0)
    record["moe"] = expert_metrics(experts, pc, cfg.model.n_layer, mixture);
  if (nlohmann::json drawn = dataset->record((at + 1) * B); !drawn.empty()) record["data"] = std::move(drawn);
  if (cfg.train.log_samples) record["sample_ids"] = sample_ids;
  if (pc.world_size() > 1) record["communication"] = communication_since(communication_before, pc.communication_stats());
  if (pc.layout().spec().pipeline > 1) record["pipeline"] = pipeline_step_record(engine.last_step());
  return record;
}

void Trainer::Run::skip_step(std::int64_t at, double loss, double norm, double loss_scale) {
  model_data->skip_step();
  ++skipped;
  ++skipped_in_a_row;
  if (!scaler && cfg.train.on_nonfinite == config::OnNonfinite::stop) throw Diverged(diverged(at, loss, norm));
  progress.line(scaler ? fmt::format("step {}: gradient overflowed in fp16 at loss scale {}: step skipped, scale now {}",
                                     at + 1, loss_scale, scaler->scale())
                       : fmt::format("step {}: {}; step skipped (train.on_nonfinite = \"skip\")", at + 1,
                                     what_is_not_finite(loss, norm)));
  if (skipped_in_a_row >= cfg.train.max_skipped_steps)
    throw Diverged(fmt::format("{} steps in a row skipped (train.max_skipped_steps = {}); {}", skipped_in_a_row,
                               cfg.train.max_skipped_steps, diverged(at, loss, norm)));
}

std::string Trainer::Run::what_is_not_finite(double loss, double norm) {
  if (!std::isfinite(loss)) return fmt::format("the loss is {}", std::isnan(loss) ? "nan" : loss > 0 ? "inf" : "-inf");
  if (const nn::Parameter* p = model_data->first_nonfinite_gradient())
    return fmt::format("the gradient of {} is not finite (gradient norm {})", p->name, norm);
  // Every gradient here is finite: their squares summed past fp32's range (the norm's sums cross
  // ranks in fp32), or another rank's gradient is not finite.
  return fmt::format("the gradient norm is {} (this rank's gradients are finite: so large that their squares overflow "
                     "fp32, or another rank's are not)", norm);
}

std::string Trainer::Run::diverged(std::int64_t at, double loss, double norm) {
  const config::TrainConfig& tc = cfg.train;
  std::string out = fmt::format(
      "step {}: {}: the run diverged, and the step did not update the weights. Lower train.lr (it is {}), keep "
      "train.grad_clip on (it is {}), or {}",
      at + 1, what_is_not_finite(loss, norm), tc.lr, tc.grad_clip,
      tc.on_nonfinite == config::OnNonfinite::skip || scaler ? "raise train.max_skipped_steps"
                                                             : "set train.on_nonfinite = \"skip\" to drop such steps");
  if (!cfg.checkpoint.dir.empty())
    out += fmt::format("; the last checkpoint in {} is intact: continue from it with --resume {}", cfg.checkpoint.dir,
                       cfg.checkpoint.dir);
  return out;
}

double Trainer::Run::evaluate() {
  prepare();
  return evaluate_loss(engine, *model_data, *dataset, runner, cfg, micro, pc, *activations);
}

void Trainer::Run::save(const std::string& dir, std::int64_t at) {
  prepare();
  const CheckpointInfo info{.step = at,
                            .consumed_samples = at * B,
                            .seed = cfg.train.seed,
                            .optimizer = {.adamw_step = model_data->optimizer_steps(),
                                          .loss_scale = scaler ? scaler->scale() : 0.0,
                                          .loss_scale_good_steps = scaler ? scaler->good_steps() : 0},
                            .config_toml = config::to_toml(cfg),
                            .layout = pc.describe().dump()};
  checkpointer->save(dir, info, model_data->held_state());
}

void Trainer::Run::checkpoint_written(const nlohmann::json& record) {
  metrics.write(record);
  const std::int64_t at = record["checkpoint_step"].get<std::int64_t>();
  const std::string dir = record["checkpoint_dir"].get<std::string>(), where = record.value("checkpoint_path", dir);
  progress.line(fmt::format("step {}: checkpoint written to {} ({}{}; training waited {:.3f} s, the slowest rank wrote "
                            "for {:.3f} s)",
                            at, where, human_bytes(record["checkpoint_bytes"].get<std::uint64_t>()),
                            record["checkpoint_async"].get<bool>() ? ", in the background" : "",
                            record["checkpoint_stall_s"].get<double>(), record["checkpoint_write_s"].get<double>()));
  for (Callback* c : callbacks) c->on_checkpoint({.step = at, .dir = dir});
}

nlohmann::json Trainer::Run::step_record(std::int64_t at, bool timed) {
  profile.take();  // what ran between steps (evaluation, checkpoints) is no step's
  nlohmann::json record = train_step(at);
  const double dt = record["step_time_s"].get<double>();
  if (timed) {
    timed_seconds += dt;
    ++timed_steps;
    const pipeline::StepProfile& p = engine.last_step();
    pipeline_sum.seconds += p.seconds;
    pipeline_sum.compute_seconds += p.compute_seconds;
    pipeline_sum.forward_seconds += p.forward_seconds;
    pipeline_sum.backward_seconds += p.backward_seconds;
    pipeline_sum.weight_seconds += p.weight_seconds;
    pipeline_sum.wait_seconds += p.wait_seconds;
    pipeline_sum.forward_wait_seconds += p.forward_wait_seconds;
    pipeline_sum.backward_wait_seconds += p.backward_wait_seconds;
    if (const auto reduction = model_data->gradient_reduction()) {
      comm_seconds += reduction->in_flight;
      exposed_seconds += reduction->exposed;
    }
  }
  if (cfg.train.profile) {
    const StepProfile::Totals totals = profile.take();
    record["profile"] = profile_record(totals, dt, 1.0);
    if (timed) accumulate_profile(profile_sum, totals);
  }
  record.update(model_data->step_record());
  if (base_stream) record["base_stream_bytes"] = base_stream->take_streamed_bytes();
  record["peak_bytes"] = {{"host", host_allocator().peak_bytes()}, {"activations", activations->peak_bytes()}};
  record["resident_bytes"] = resident_bytes();  // as the OS counts it: a long run's leak shows here
  return record;
}

TrainSummary Trainer::Run::fit() {
  prepare();
  const config::TrainConfig& tc = cfg.train;
  const std::int64_t start = step;
  const std::int64_t end = options.stop_after > 0 ? std::min(options.stop_after, tc.steps) : tc.steps;
  const std::int64_t warm = std::min<std::int64_t>(3, std::max<std::int64_t>(0, end - start - 1));
  // train.profile: the steps' op and module times; the timed steps' sum goes into the summary.
  std::optional<ProfileRecording> recording;
  if (tc.profile) recording.emplace(profile);
  // The run's own callbacks around the user's (engine/run_callbacks.h).
  std::vector<Callback*> all;
  StepLog log(progress, metrics, start, end, tc.steps, floor,
              [this] { return std::pair(host_allocator().peak_bytes(), activations->peak_bytes()); });
  PeriodicEvaluation evaluation(tc.eval_every, tc.steps, [this] { return evaluate(); }, all);
  PeriodicSample samples([this, end](std::int64_t at) { return sampler && sampler->due(at, end); },
                         [this](std::int64_t at) { return sampler->line(*model, pc.world_size(), at); }, progress);
  PeriodicCheckpoint checkpoints(
      cfg.checkpoint.dir.empty() ? 0 : cfg.checkpoint.every, [this] { checkpointer->poll(); },
      [this](std::int64_t at) { save(cfg.checkpoint.dir, at); });
  all.push_back(&log);
  all.insert(all.end(), callbacks.begin(), callbacks.end());
  all.insert(all.end(), {&evaluation, &samples, &checkpoints});

  bool stopped_early = false;
  try {  // an operator that ran out of the device tier: the model data keeper says how it uses it
    for (; step < end && !stopped_early; ++step) {
      const nlohmann::json record = step_record(step, step - start >= warm);
      const StepEnd done{.step = step + 1,
                         .loss = record["loss"].get<double>(),
                         .lr = record["lr"].get<double>(),
                         .grad_norm = record["grad_norm"].get<double>(),
                         .tokens_per_s = record["tokens_per_s"].get<double>(),
                         .record = record};
      for (Callback* c : all) c->on_step_end(done);
      stopped_early = agreed_stop() && step + 1 < end;
      if (stopped_early) progress.line(fmt::format("step {}: stopped by a callback", step + 1));
    }
    // The last step's checkpoint (resumed with --stop-after at the checkpoint's own step, the
    // checkpoint again as this layout loaded it: a check that it loads under this layout).
    if (!cfg.checkpoint.dir.empty() && checkpoints.saved() != step) save(cfg.checkpoint.dir, step);
    checkpointer->finish();  // the last checkpoint complete before the run ends
  } catch (const OutOfMemory& e) {
    throw OutOfMemory(e.what() + model_data->out_of_memory_hint(e), e.needed());
  }
  progress.finish();
  recording.reset();
  return summarize(step, stopped_early);
}

bool Trainer::Run::agreed_stop() {
  if (callbacks.empty()) return false;  // the run's own never stop it (every rank has the same callbacks)
  bool stop = false;
  for (Callback* c : callbacks) stop = c->should_stop() || stop;
  return any_rank(pc, stop);
}

TrainSummary Trainer::Run::summarize(std::int64_t end, bool stopped_early) {
  const config::TrainConfig& tc = cfg.train;
  TrainSummary summary;
  summary.steps_done = end;
  summary.stopped_early = stopped_early;
  summary.final_train_loss = train_loss;
  summary.final_loss = evaluate();
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
                           {"parameters_trained", model->num_parameters(true)},
                           {"optimizer_state_bytes", model_data->optimizer_state_bytes()},
                           {"frozen_bytes", frozen_base_bytes(engine.frozen_parameters())},  // on the tier frozen_on names
                           {"frozen_on", base_stream ? config::name_of(cfg.finetune.base_offload) : "device"},
                           {"peak_bytes", {{"host", host_allocator().peak_bytes()}, {"activations", activations->peak_bytes()}}},
                           {"activation_checkpointing", config::name_of(tc.activation_checkpointing)},
                           {"precision", config::name_of(tc.precision)},
                           {"zero_stage", cfg.zero.stage},
                           {"model_data", summary.model_data},
                           {"layout", pc.describe()},
                           {"communication", pc.communication_stats()}};
  if (pc.world_size() > 1)  // every rank's peaks (the cost model's check compares each: sim/cost_model.h)
    record["peak_bytes"].update(pc.per_rank({{"host", std::int64_t(host_allocator().peak_bytes())},
                                             {"activations", std::int64_t(activations->peak_bytes())}}));
  if (pc.layout().spec().pipeline > 1 && timed_steps > 0)
    record["pipeline"] = pipeline_run_record(pc, pipeline_sum, engine.last_step().held_weight_gradients);
  if (stopped_early) record["stopped_early"] = true;
  if (floor) record["entropy_floor"] = *floor;
  if (scaler) {
    record["skipped_steps"] = skipped;
    record["loss_scale"] = scaler->scale();
  }
  const auto reduction = model_data->gradient_reduction();
  if (reduction && comm_seconds > 0) {
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
                            human_bytes(activations->peak_bytes())));
  if (summary.allreduce_hidden_fraction) {
    progress.line(fmt::format("gradients: {} over {} ranks {:.1f} ms per step, {:.0f}% of it hidden behind "
                              "backward",
                              reduction->collective, replicas * pc.layout().spec().sequence,
                              1e3 * comm_seconds / double(timed_steps),
                              100 * *summary.allreduce_hidden_fraction));
  }
  if (record.contains("profile")) {
    for (const std::string& line : profile_lines(record["profile"])) progress.line(line);
    // A GPU op returns once its kernels are queued: its time is the launch's, and the kernels'
    // time lands in whichever op waits next. Blocking launches make each op wait for its own.
    const char* blocking = std::getenv("CUDA_LAUNCH_BLOCKING");
    if (cfg.train.device == Device::Kind::cuda && !(blocking && std::string_view(blocking) == "1"))
      progress.line("profile: on a GPU an op's time above is its launch; run with CUDA_LAUNCH_BLOCKING=1 for its "
                    "kernels' (bench/gpu_step_profile.py does, beside PyTorch)");
  }
  if (!cfg.checkpoint.dir.empty()) progress.line(fmt::format("checkpoint: {}", cfg.checkpoint.dir));
  summary.record = std::move(record);
  return summary;
}

Trainer::Trainer(const config::Config& cfg, parallel::ParallelContext& pc, TrainOptions options)
    : run_(std::make_unique<Run>(cfg, pc, std::move(options))) {}

Trainer::Trainer(const config::Config& cfg, TrainOptions options)
    : own_pc_(std::make_unique<parallel::ParallelContext>(config::context_options(cfg), nullptr)),
      run_(std::make_unique<Run>(cfg, *own_pc_, std::move(options))) {}

Trainer::~Trainer() = default;

void Trainer::add_callback(Callback& callback) { run_->callbacks.push_back(&callback); }

void Trainer::load(const std::string& dir) {
  TIDAL_CHECK(!run_->model_data,
              "Trainer::load('{}') after the run began (fit, evaluate or save): load a checkpoint first", dir);
  run_->options.resume_path = dir;
}

TrainSummary Trainer::fit() { return run_->fit(); }
double Trainer::evaluate() { return run_->evaluate(); }
void Trainer::save(const std::string& dir) {
  run_->save(dir, run_->step);
  run_->checkpointer->finish();
}
std::int64_t Trainer::step() const { return run_->step; }
models::Model& Trainer::model() { return *run_->model; }
const config::Config& Trainer::config() const { return run_->cfg; }
parallel::ParallelContext& Trainer::context() { return run_->pc; }

TrainSummary train(const config::Config& cfg, const TrainOptions& options, parallel::ParallelContext& pc) {
  return Trainer(cfg, pc, options).fit();
}

TrainSummary train(const config::Config& cfg, const TrainOptions& options) { return Trainer(cfg, options).fit(); }

}  // namespace tidal::engine
