#include "engine/model_data.h"

#include "config/options.h"
#include "core/bytes.h"
#include "core/gpu.h"
#include "engine/checkpoint/reader.h"
#include "engine/finetune.h"
#include "distributed/gradient_reducer.h"
#include "distributed/rank_chunks.h"
#include "memory/chunk_manager.h"
#include "nn/on_host.h"
#include "nn/tp/shard.h"
#include "ops/grad_norm.h"
#include "optim/adamw.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace tidal::engine {

Allocator& device_tier(const config::Config& cfg) {
  return cfg.train.device == Device::Kind::cuda ? gpu_allocator() : device_allocator();
}

Allocator& host_tier(const config::Config& cfg) {
  return cfg.train.device == Device::Kind::cuda ? pinned_host_allocator() : host_allocator();
}

namespace {

ops::AdamWOptions adamw_options(const config::TrainConfig& tc) {
  return {.lr = float(tc.lr), .beta1 = float(tc.beta1), .beta2 = float(tc.beta2), .eps = 1e-8f,
          .weight_decay = float(tc.weight_decay)};
}

// The AdamW state of `params` (the fp32 weights read into p.data) from checkpoint `reader`.
void load_tensors(CheckpointReader& reader, const std::vector<nn::Parameter*>& params, optim::AdamW& adam) {
  for (std::size_t i = 0; i < params.size(); ++i) {
    const nn::Parameter& p = *params[i];
    reader.read_block(p.name, p, p.data);
    reader.read_block("m." + p.name, p, adam.momentum(i));
    reader.read_block("v." + p.name, p, adam.variance(i));
  }
  adam.set_steps_taken(reader.info().optimizer.adamw_step);
}

// Each parameter a tensor of its own, AdamW, gradients all-reduced in buckets during backward.
class TensorModelData final : public ModelData {
 public:
  TensorModelData(const config::Config& cfg, pipeline::PipelineEngine& engine, parallel::ParallelContext& pc,
                  nn::Runner& runner, const std::string& resume_path)
      : engine_(engine), params_(engine.parameters()), reducer_(make_reducer(cfg, engine, pc, false)),
        expert_reducer_(make_reducer(cfg, engine, pc, true)), adam_(params_, adamw_options(cfg.train)),
        replicas_(pc.layout().spec().data), bucket_mb_(cfg.parallel.bucket_mb) {
    if (!resume_path.empty()) {
      CheckpointReader reader(resume_path);
      load_tensors(reader, params_, adam_);
      resumed_ = reader.info();
    }
    for (distributed::GradientReducer* r : reducers()) runner.add_hooks(r);
  }

  void zero_grad() override { engine_.zero_grad(); }

  pipeline::ActionHooks hooks(std::int64_t micro_batches) override {
    // With one chunk per rank the reducer overlaps with the last micro-batch's backward; with
    // several, chunks finish at different times, and under B and W the gradients at the last W:
    // it all-reduces after backward.
    if (reducers().empty() || reduces_after_backward()) return {};
    pipeline::ActionHooks hooks;
    hooks.before_backward = [this, micro_batches](const pipeline::Action& a) {
      for (distributed::GradientReducer* r : reducers()) r->set_sync(a.micro_batch + 1 == micro_batches);
    };
    return hooks;
  }

  void finish_backward() override {
    for (distributed::GradientReducer* r : reducers()) {
      if (reduces_after_backward()) r->set_sync(true);
      r->finish();
    }
    engine_.reduce_tied_gradients();
    // Parameters held by several ranks of a tensor grid that saw different samples.
    nn::tp::reduce_replicated_gradients(params_);
  }

  double squared_gradient_norm() override { return engine_.squared_gradient_norm(); }
  const nn::Parameter* first_nonfinite_gradient() override {
    for (const nn::Parameter* p : engine_.parameters())
      if (!std::isfinite(ops::sum_of_squares(p->grad))) return p;
    return nullptr;
  }

  void step(float lr, float gradient_scale, double norm, double max_norm) override {
    TIDAL_ASSERT(gradient_scale == 1.0f, "fp32 tensors carry no loss scale");
    adam_.set_lr(lr);
    // Clipping folds into the scale the update divides out, as the chunk keeper's does: no pass
    // over the gradients of its own.
    adam_.set_grad_scale(float(1.0 / ops::clip_factor(norm, max_norm)));
    adam_.step();
  }

  void skip_step() override {}  // the next step zeroes the gradient
  std::int64_t optimizer_steps() const override { return adam_.steps_taken(); }

  std::vector<HeldBlock> held_state() override {
    // Every rank holds its blocks' whole state: replicas and ring positions the same (the
    // checkpointer has one of them write it).
    std::vector<HeldBlock> out;
    for (std::size_t i = 0; i < params_.size(); ++i)
      out.push_back({params_[i], {{{params_[i]->data}, {adam_.momentum(i)}, {adam_.variance(i)}}}});
    return out;
  }

  std::int64_t optimizer_state_bytes() const override {
    std::int64_t bytes = 0;
    for (std::size_t i = 0; i < params_.size(); ++i)
      bytes += std::int64_t(params_[i]->data.nbytes() + adam_.momentum(i).nbytes() + adam_.variance(i).nbytes());
    return bytes;
  }

  std::string describe() const override {
    if (replicas_ == 1) return "";
    return fmt::format("gradients all-reduced over the {} data replicas in {} buckets of {} MiB during backward",
                       replicas_, reducer_->bucket_count(), bucket_mb_);
  }
  std::optional<GradientReductionTime> gradient_reduction() const override {
    if (!reducer_) return std::nullopt;
    return GradientReductionTime{reducer_->comm_seconds(), reducer_->exposed_seconds(), "all-reduce"};
  }

 private:
  pipeline::PipelineEngine& engine_;
  // Ranks holding the same parameters: data replicas, and the sequence ring's positions, whose
  // gradients are each their positions' share. Their sum is the step's gradient. The buckets are
  // made before AdamW's moments: while they take the gradients over, both copies exist, and
  // beside the moments that would be the run's host peak (measured: 20 bytes a parameter, not 16).
  // A mixture's experts under expert parallelism (nn::Parameter::expert_group) are summed over the
  // data ranks holding the same experts (`experts`), the rest over the chunk group.
  static std::unique_ptr<distributed::GradientReducer> make_reducer(const config::Config& cfg,
                                                                    pipeline::PipelineEngine& engine,
                                                                    parallel::ParallelContext& pc, bool experts) {
    comm::Communicator& group = experts ? pc.group(parallel::GroupKind::expert_data) : distributed::chunk_group(pc);
    std::vector<nn::Parameter*> params;
    for (nn::Parameter* p : engine.parameters())
      if ((p->expert_group != nullptr) == experts) params.push_back(p);
    if (group.size() == 1 || params.empty()) return nullptr;
    return std::make_unique<distributed::GradientReducer>(engine.layers(), params, group,
                                                          std::int64_t(cfg.parallel.bucket_mb * 1024 * 1024));
  }
  // Whether the gradients are complete only after every action (model chunks, B and W passes).
  bool reduces_after_backward() const { return engine_.chunks() > 1 || engine_.splits_backward(); }
  std::vector<distributed::GradientReducer*> reducers() {
    std::vector<distributed::GradientReducer*> out;
    for (auto* r : {&reducer_, &expert_reducer_})
      if (*r) out.push_back(r->get());
    return out;
  }

  const std::vector<nn::Parameter*>& params_;
  std::unique_ptr<distributed::GradientReducer> reducer_, expert_reducer_;
  optim::AdamW adam_;
  int replicas_;
  double bucket_mb_;
};

// PatrickStar's chunks (ZeRO stages 0-3) in train.precision, under any layout: a rank's lists
// hold the parameters it materializes (its tensor blocks, its pipeline stage's), shared by the
// ranks of chunk_group.
class ChunkModelData final : public ModelData {
 public:
  ChunkModelData(const config::Config& cfg, models::Model& model, pipeline::PipelineEngine& engine,
                 parallel::ParallelContext& pc, nn::Runner& runner, const std::string& resume_path, std::int64_t accum,
                 bool enforce_device_limit)
      : engine_(engine), pc_(pc), group_(distributed::chunk_group(pc)), options_(adamw_options(cfg.train)),
        device_(&device_tier(cfg)), frozen_on_device_(cfg.finetune.base_offload == config::BaseOffload::none
                              ? frozen_base_bytes(engine.frozen_parameters()) : 0) {
    const std::vector<nn::Parameter*>& params = engine.parameters();
    // memory.embedding_on_host: the embedding layer's parameters in chunk lists of their own on the
    // host (patrickstar-v1 sec. 8.2 keeps them out of chunks; lists of their own give them the
    // same mixed precision, gradient norm, optimizer and checkpoints as the rest).
    const std::vector<nn::Parameter*> embedding = nn::parameters_on_host(model);
    // A mixture's experts under expert parallelism (nn::Parameter::expert_group) in lists of their
    // own, shared by the data ranks holding the same experts (parallel::GroupKind::expert_data).
    std::vector<nn::Parameter*> on_host, on_device, experts;
    for (nn::Parameter* p : params)
      (std::find(embedding.begin(), embedding.end(), p) != embedding.end() ? on_host
       : p->expert_group != nullptr                                       ? experts
                                                                          : on_device)
          .push_back(p);
    memory::ChunkOptions options = config::chunk_options(cfg, accum > 1);
    options.group = &group_;
    make_tiers(cfg, options);
    // A checkpoint: the weights into the parameters now (the chunks copy them), the moments once
    // the chunks exist, each rank reading only its blocks.
    std::optional<CheckpointReader> reader;
    if (!resume_path.empty()) {
      reader.emplace(resume_path);
      for (nn::Parameter* p : params) reader->read_block(p->name, *p, p->data);
      resumed_ = reader->info();
      steps_ = resumed_->optimizer.adamw_step;
    }
    offload_ = cfg.memory.offload;
    enforce_device_limit_ = enforce_device_limit;
    if (cfg.memory.embedding_on_host) {
      // First, so that memory.host_limit counts them before the device's chunks claim the rest.
      // (Every rank agrees on the size; the stages without the embedding hold no such list.)
      memory::ChunkOptions host_options = options;
      host_options.offload.reset();
      host_options.tier = nullptr;
      memory::ChunkParameters host_params = distributed::chunk_parameters(on_host, engine, pc);
      host_options.chunk_elements =
          distributed::agreed_chunk_size(host_params, host_options, optimizer_memory_->capacity(), pc);
      if (!on_host.empty())
        host_chunks_.emplace(std::move(host_params), host_options, *optimizer_memory_, *optimizer_memory_);
    }
    try {
      Allocator& param_tier = options.offload ? *device_ : *param_memory_;
      memory::ChunkParameters device_params = distributed::chunk_parameters(on_device, engine, pc);
      memory::ChunkOptions expert_options = options;  // the configured size, or a search of their own
      options.chunk_elements = distributed::agreed_chunk_size(device_params, options, param_tier.capacity(), pc);
      chunks_.emplace(std::move(device_params), options, param_tier, *optimizer_memory_);
      if (pc.layout().spec().expert > 1) {  // every rank agrees on the experts' chunk size too
        expert_options.group = &pc.group(parallel::GroupKind::expert_data);
        memory::ChunkParameters expert_params = distributed::chunk_parameters(experts, engine, pc);
        expert_options.chunk_elements =
            distributed::agreed_chunk_size(expert_params, expert_options, param_tier.capacity(), pc);
        if (!experts.empty())
          expert_chunks_.emplace(std::move(expert_params), expert_options, param_tier, *optimizer_memory_);
      }
    } catch (const OutOfMemory& e) {  // the static partition's param list does not fit
      throw OutOfMemory(e.what() + out_of_memory_hint(e), e.needed());
    }
    for (const memory::ChunkManager* c : {&*chunks_, expert_chunks_ ? &*expert_chunks_ : nullptr})
      if (c) param_list_bytes_ += c->layout().chunks * c->layout().chunk_elements;
    param_list_bytes_ *= std::int64_t(dtype_size(cfg.train.precision));
    if (reader) load_moments(*reader, params);
    // A step's record counts the step's moves, not the disk tier's first writes.
    if (const memory::DynamicMemory* dmm = chunks_->dynamic_memory()) reported_ = dmm->stats();
    // From here on the step's tensors count in the device tier (the checkpoint's above stayed on
    // the host: the device tier holds chunks and a step's tensors only). Only where that tier is
    // host memory: on a GPU the trainer puts a step's tensors in the activations' share of it,
    // and host-side tensors (the data's batches) must stay host memory.
    if (options.offload && !device_->device().is_cuda()) on_device_.emplace(*device_);
    runner.add_hooks(&*chunks_);
    if (host_chunks_) runner.add_hooks(&*host_chunks_);
    if (expert_chunks_) runner.add_hooks(&*expert_chunks_);
    stage_ = cfg.zero.stage;
    fetch_ = cfg.zero.fetch;
    precision_ = cfg.train.precision;
  }

  ~ChunkModelData() override {
    chunks_.reset();
    host_chunks_.reset();
    if (on_device_) device_->set_capacity(std::numeric_limits<std::size_t>::max());
  }

  void zero_grad() override {
    for (memory::ChunkManager* c : keepers()) c->zero_grad();
  }

  // An action runs through its model chunk (a phase of the lists).
  pipeline::ActionHooks hooks(std::int64_t micro_batches) override {
    return {.before_forward =
                [this](const pipeline::Action& a) {
                  for (memory::ChunkManager* c : keepers()) c->begin_forward(a.chunk);
                },
            .before_backward =
                [this, micro_batches](const pipeline::Action& a) {
                  for (memory::ChunkManager* c : keepers()) {
                    c->end_forward(a.chunk);
                    c->set_sync(a.micro_batch + 1 == micro_batches, a.chunk);
                  }
                },
            .after_backward =
                [this](const pipeline::Action& a) {
                  for (memory::ChunkManager* c : keepers()) c->end_backward(a.chunk);
                }};
  }

  // Parameters other ranks hold beyond the chunk group (a grid's replicated blocks, the tied
  // embedding at the pipeline's ends): their owned gradient chunks summed over those ranks.
  void finish_backward() override {
    for (memory::ChunkManager* c : keepers()) c->reduce_replicas();
  }
  void end_forward_only() override {
    for (memory::ChunkManager* c : keepers()) c->end_forward_only();
  }
  // Each block counted once: a tied embedding on the first stage only, a block replicated over
  // tensor ranks once (nn::Parameter::copies). The host's parameters come first in the model, so
  // the local sum runs in the model's order (the same bits as one list's); then it is summed
  // over the ranks holding other parts - the chunk group's owners under ZeRO, the tensor
  // group's blocks, the pipeline's stages.
  double squared_gradient_norm() override {
    const bool first_stage = pc_.coordinates().pipeline == 0;
    const memory::ChunkManager::ParameterWeight weight = [&](const nn::Parameter& p) {
      return engine_.tied(p) && !first_stage ? 0.0 : 1.0 / double(p.copies);
    };
    double sum = 0;
    for (memory::ChunkManager* c : keepers())
      if (c != expert_keeper()) sum = c->local_squared_gradient_norm(sum, weight);
    if (memory::ChunkManager* experts = expert_keeper()) {  // summed over their owners and the expert group
      Tensor part = Tensor::full({1}, float(experts->local_squared_gradient_norm(0, weight)));
      comm::Communicator& owners = pc_.group(parallel::GroupKind::expert_data);
      if (stage_ > 0 && owners.size() > 1) owners.all_reduce(part)->wait();
      pc_.group(parallel::GroupKind::expert).all_reduce(part)->wait();
      sum += double(part.item());
    }
    std::vector<comm::Communicator*> over;
    if (stage_ > 0 && group_.size() > 1) over.push_back(&group_);
    for (parallel::GroupKind kind : {parallel::GroupKind::tensor, parallel::GroupKind::pipeline})
      if (pc_.group(kind).size() > 1) over.push_back(&pc_.group(kind));
    if (over.empty()) return sum;
    Tensor total = Tensor::full({1}, float(sum));
    for (comm::Communicator* g : over) g->all_reduce(total)->wait();
    return double(total.item());
  }

  const nn::Parameter* first_nonfinite_gradient() override {
    for (memory::ChunkManager* c : keepers())
      if (const nn::Parameter* p = c->first_nonfinite_gradient()) return p;
    return nullptr;
  }

  void step(float lr, float gradient_scale, double norm, double max_norm) override {
    // Clipping folds into the scale the update divides out (torch.nn.utils.clip_grad_norm_'s
    // factor max_norm / (norm + 1e-6)).
    ops::AdamWOptions o = options_;
    o.lr = lr;
    o.grad_scale = float(double(gradient_scale) / ops::clip_factor(norm, max_norm));
    ++steps_;
    for (memory::ChunkManager* c : keepers()) c->adamw_step(o, steps_);
    check_device_limit();
  }

  void skip_step() override {
    for (memory::ChunkManager* c : keepers()) c->skip_step();
    check_device_limit();
  }
  std::int64_t optimizer_steps() const override { return steps_; }

  std::vector<HeldBlock> held_state() override {
    std::vector<HeldBlock> out;
    for (memory::ChunkManager* c : keepers())
      c->held_state([&](const nn::Parameter& p, const std::array<memory::StateView, 3>& state) {
        out.push_back({&p, state});
      });
    return out;
  }

  // The chunk groups' reductions (memory/chunk_manager.h), under offload's ring not timed.
  std::optional<GradientReductionTime> gradient_reduction() const override {
    if (group_.size() == 1 || (stage_ > 0 && chunks_->dynamic_memory())) return std::nullopt;
    GradientReductionTime t{.collective = stage_ > 0 ? "reduce-scatter" : "all-reduce"};
    for (const memory::ChunkManager* c : {host_chunks_ ? &*host_chunks_ : nullptr, &*chunks_})
      if (c) {
        t.in_flight += c->reduction_time().in_flight;
        t.exposed += c->reduction_time().waited;
      }
    return t;
  }

  std::string describe() const override {
    const memory::ChunkLayout& l = chunks_->layout();
    const int ranks = group_.size();
    const char* what[] = {"every rank holds all model data, gradients all-reduced", "optimizer states sharded",
                          "optimizer states and gradients sharded",
                          "optimizer states, gradients and parameters sharded"};
    std::string tiers;
    if (chunks_->dynamic_memory())
      tiers = offload_ == config::Offload::static_split
                  ? fmt::format("; static partition (ZeRO-Offload): params on a device tier of {}, optimizer states "
                                "and Adam on the host",
                                human_bytes(device_->capacity()))
                  : fmt::format("; chunks move between a device tier of {} and the host ({} eviction after a warm-up "
                                "iteration)",
                                human_bytes(device_->capacity()), eviction_);
    if (const memory::DiskTier* disk = chunks_->disk_tier(); disk && !disk->chunks().empty())
      tiers += fmt::format("; the optimizer states of the last {} chunks ({}) beyond memory.host_limit in {}",
                           disk->chunks().size(), human_bytes(std::uint64_t(disk->store().file_bytes())),
                           disk->store().path());
    if (const memory::DiskTier* disk = expert_chunks_ ? expert_chunks_->disk_tier() : nullptr;
        disk && !disk->chunks().empty())
      tiers += fmt::format("; the optimizer states of the experts' last {} chunks ({}) in {}", disk->chunks().size(),
                           human_bytes(std::uint64_t(disk->store().file_bytes())), disk->store().path());
    if (expert_chunks_) {
      const memory::ChunkLayout& x = expert_chunks_->layout();
      tiers += fmt::format("; this rank's experts in lists of their own ({} chunks of {} elements, {}) over the {} "
                           "data ranks holding them", x.chunks, x.chunk_elements,
                           human_bytes(std::uint64_t(expert_chunks_->model_data_bytes())),
                           pc_.group(parallel::GroupKind::expert_data).size());
    }
    if (host_chunks_) {
      const memory::ChunkLayout& h = host_chunks_->layout();
      tiers += fmt::format("; the embedding layer's {} parameters on the host ({} chunks of {} elements, {}), its "
                           "lookups on the CPU",
                           host_chunks_->parameters().size(), h.chunks, h.chunk_elements,
                           human_bytes(std::uint64_t(host_chunks_->model_data_bytes())));
    }
    return fmt::format("model data in {} chunks of {} elements ({:.1f}% padding), params {}{}; {}; {} of model data on "
                       "this rank{}",
                       l.chunks, l.chunk_elements, 100 * l.fragmentation(), config::name_of(precision_),
                       precision_ == DType::f32 ? "" : " with fp32 master weights",
                       ranks > 1 ? fmt::format("zero.stage {} over {} data{} ranks: {}{}", stage_, ranks,
                                               pc_.layout().spec().sequence > 1 ? " x sequence" : "", what[stage_],
                                               stage_ > 0 ? fmt::format(", parameters by {}", fetch_) : "")
                                 : "one rank",
                       human_bytes(std::uint64_t(model_data_bytes())), tiers);
  }

  std::int64_t optimizer_state_bytes() const override {
    std::int64_t owned = chunks_->owned_parameter_elements();
    if (host_chunks_) owned += host_chunks_->owned_parameter_elements();
    if (expert_chunks_) owned += expert_chunks_->owned_parameter_elements();
    return owned * 3 * std::int64_t(sizeof(float));  // fp32 master, momentum, variance
  }

  nlohmann::json memory() const override {
    nlohmann::json out = {{"param_bytes_peak", param_memory_->peak_bytes()},
                          {"optimizer_bytes_peak", optimizer_memory_->peak_bytes()},
                          {"model_data_bytes", model_data_bytes()}};
    if (host_chunks_) out["embedding_on_host_bytes"] = host_chunks_->model_data_bytes();
    if (const memory::DynamicMemory* dmm = chunks_->dynamic_memory()) {
      // What this rank needs of each tier (tidal plan reads them): the least device cap its
      // warm-up traced, and the host bytes its lists take at the start (with a disk tier, the
      // least: every optimizer state on disk).
      const std::int64_t embedding = host_chunks_ ? host_chunks_->model_data_bytes() : 0;
      const std::int64_t host = chunks_->host_bytes_needed(false) + embedding +
                                (expert_chunks_ ? expert_chunks_->host_bytes_needed(false) : 0),
                         with_disk = chunks_->host_bytes_needed(true) + embedding +
                                     (expert_chunks_ ? expert_chunks_->host_bytes_needed(true) : 0);
      out["least_device_limit_bytes"] = dmm->least_device_limit();
      out["host_needs_bytes"] = host;
      out["host_needs_with_disk_bytes"] = with_disk;
      out["chunk_elements"] = chunks_->layout().chunk_elements;
    }
    if (pc_.world_size() > 1) {
      std::int64_t held = 0;  // elements of the parameters this rank materializes
      for (const nn::Parameter* p : engine_.parameters()) held += p->shape.numel();
      nlohmann::json mine = {{"model_data_bytes", model_data_bytes()},
                             {"parameters", held},
                             {"param_bytes_peak", std::int64_t(param_memory_->peak_bytes())},
                             {"optimizer_bytes_peak", std::int64_t(optimizer_memory_->peak_bytes())}};
      for (const char* key : {"least_device_limit_bytes", "host_needs_bytes", "host_needs_with_disk_bytes"})
        if (out.contains(key)) mine[key] = out[key];
      if (const memory::DynamicMemory* dmm = chunks_->dynamic_memory())
        mine["device_peak_bytes"] = std::int64_t(dmm->device_peak_bytes());
      out.update(pc_.per_rank(mine));
    }
    if (const memory::DynamicMemory* dmm = chunks_->dynamic_memory()) {
      out["offload"] = dmm->json();
      out["offload"]["device_limit_bytes"] = device_->capacity();
      out["offload"]["trace"] = dmm->tracer().json();
    }
    return out;
  }

  std::string out_of_memory_hint(const OutOfMemory& e) const override {
    if (offload_ != config::Offload::static_split) return "";
    return fmt::format(
        "; the static partition (memory.offload = \"static\") keeps the whole param list{} on the device, so the "
        "device tier needs it plus the step's activations and gradients: at least {}, more than memory.device_limit "
        "= {}; memory.offload = \"chunk\" moves chunks to the host instead",
        param_list_bytes_ ? fmt::format(" ({})", human_bytes(std::uint64_t(param_list_bytes_))) : "",
        human_bytes(e.needed()), human_bytes(device_->capacity()));
  }

  nlohmann::json step_record() override {
    const memory::DynamicMemory* dmm = chunks_->dynamic_memory();
    if (!dmm) return nlohmann::json::object();
    const memory::MoveStats now = dmm->stats();
    nlohmann::json out = {{"bytes_host_to_device", now.bytes_to_device - reported_.bytes_to_device},
                          {"bytes_device_to_host", now.bytes_to_host - reported_.bytes_to_host},
                          {"evictions", now.evictions - reported_.evictions},
                          {"move_s", now.seconds - reported_.seconds},
                          {"device_peak_bytes", dmm->device_peak_bytes()}};
    if (dmm->has_disk()) {
      out["bytes_to_disk"] = now.bytes_to_disk - reported_.bytes_to_disk;
      out["bytes_from_disk"] = now.bytes_from_disk - reported_.bytes_from_disk;
      out["disk_seconds"] = now.disk_seconds - reported_.disk_seconds;
    }
    reported_ = now;
    // Each rank moves its own lists: the counts of every rank, in world rank order (the keys
    // above are this rank's: the main rank's in the metrics).
    if (pc_.world_size() > 1) {
      nlohmann::json mine;
      for (const char* key : {"bytes_host_to_device", "bytes_device_to_host", "evictions", "device_peak_bytes"})
        mine[key] = out[key];
      out.update(pc_.per_rank(mine));
    }
    return out;
  }

 private:
  // The memory the lists live in (param_memory_, optimizer_memory_), and under offload the device
  // tier's cap and its one dynamic memory, which `options` hands every chunk manager.
  void make_tiers(const config::Config& cfg, memory::ChunkOptions& options) {
    // The lists count apart from everything else. On the CPU path they are host memory of their
    // own; on a GPU, shares of its memory, and under offload the optimizer side is pinned host.
    if (cfg.train.device == Device::Kind::cuda) {
      param_memory_ = std::make_unique<SubAllocator>(gpu_allocator());
      optimizer_memory_ = std::make_unique<SubAllocator>(options.offload ? host_tier(cfg) : gpu_allocator());
    } else {
      param_memory_ = std::make_unique<HostAllocator>(MemoryTier::device);
      optimizer_memory_ = std::make_unique<HostAllocator>();
    }
    if (options.offload) {
      // The device tier binds the chunks on it and the step's other tensors (activations,
      // gradients in flight, workspaces) together, as a GPU's memory does. A GPU without a cap
      // offers what it has free now, less a tenth for the CUDA libraries' own workspaces.
      device_->set_capacity(!cfg.memory.device_limit.empty()
                                ? config::parse_bytes(cfg.memory.device_limit, "memory.device_limit")
                                : device_->current_bytes() + gpu_free_bytes() / 10 * 9);
      device_->reset_peak();
      if (!cfg.memory.host_limit.empty())
        optimizer_memory_->set_capacity(config::parse_bytes(cfg.memory.host_limit, "memory.host_limit"));
      eviction_ = cfg.memory.eviction;
      // One dynamic memory of the device tier for every list in it (the experts' beside the rest).
      tier_.emplace(*options.offload, *device_, *optimizer_memory_);
      options.tier = &*tier_;
    }
  }

  // The chunk managers, the host's (memory.embedding_on_host) first, the experts' last.
  std::vector<memory::ChunkManager*> keepers() {
    std::vector<memory::ChunkManager*> out;
    if (host_chunks_) out.push_back(&*host_chunks_);
    out.push_back(&*chunks_);
    if (expert_chunks_) out.push_back(&*expert_chunks_);
    return out;
  }
  memory::ChunkManager* expert_keeper() { return expert_chunks_ ? &*expert_chunks_ : nullptr; }
  memory::ChunkManager& keeper_of(const nn::Parameter& p) {
    if (expert_chunks_ && expert_chunks_->manages(p)) return *expert_chunks_;
    return host_chunks_ && host_chunks_->manages(p) ? *host_chunks_ : *chunks_;
  }
  // The moments of the parameters whose optimizer states this rank keeps, one parameter's at a
  // time through host memory.
  void load_moments(CheckpointReader& reader, const std::vector<nn::Parameter*>& params) {
    for (nn::Parameter* p : params) {
      memory::ChunkManager& keeper = keeper_of(*p);
      if (!keeper.keeps_state(*p)) continue;
      Tensor m = Tensor::empty(p->shape, DType::f32, host_allocator()), v = Tensor::empty(p->shape, DType::f32, host_allocator());
      reader.read_block("m." + p->name, *p, m);
      reader.read_block("v." + p->name, *p, v);
      keeper.load_moments(*p, m, v);
    }
  }
  // Once the warm-up is traced (the first step): the least device cap of every rank
  // (DynamicMemory::least_device_limit). A cap below the largest stops every rank, naming it: a
  // run that goes on would run out of the device tier in its next step.
  void check_device_limit() {
    const memory::DynamicMemory* dmm = chunks_->dynamic_memory();
    if (device_limit_checked_ || !dmm || !dmm->tracer().finished()) return;
    device_limit_checked_ = true;
    if (!enforce_device_limit_) return;
    std::vector<std::int64_t> least{dmm->least_device_limit()};
    if (pc_.world_size() > 1)
      least = pc_.per_rank({{"least", least[0]}})["least_per_rank"].get<std::vector<std::int64_t>>();
    const int worst = int(std::max_element(least.begin(), least.end()) - least.begin());
    const std::int64_t L = dmm->device_limit(), need = least[std::size_t(worst)];
    if (need <= L) return;
    std::string why = worst == pc_.rank() ? dmm->least_device_limit_reason()
                                          : "the warm-up iteration needs more than on any other rank (that "
                                            "rank's error says what)";
    if (frozen_on_device_ > 0)
      why += fmt::format(" ({} of it the frozen base: finetune.base_offload = \"host\" keeps that in host memory, "
                         "each module's weights brought in as it runs)",
                         human_bytes(std::uint64_t(frozen_on_device_)));
    throw OutOfMemory(fmt::format("out of device memory: memory.device_limit = {} bytes ({}) is too small for this "
                                  "run: {}{}; the device tier needs at least {} bytes ({}): raise memory.device_limit "
                                  "to that, or make the batch (train.micro_batch_size) or memory.chunk_size smaller",
                                  L, human_bytes(std::uint64_t(L)),
                                  pc_.world_size() > 1 ? fmt::format("on rank {}, ", worst) : "", why, need,
                                  human_bytes(std::uint64_t(need))),
                      std::size_t(need));
  }

  std::int64_t model_data_bytes() const {
    return chunks_->model_data_bytes() + (host_chunks_ ? host_chunks_->model_data_bytes() : 0) +
           (expert_chunks_ ? expert_chunks_->model_data_bytes() : 0);
  }

  pipeline::PipelineEngine& engine_;
  parallel::ParallelContext& pc_;
  comm::Communicator& group_;  // chunk_group
  ops::AdamWOptions options_;
  Allocator* device_;                         // the device tier (device_tier)
  std::unique_ptr<Allocator> param_memory_;      // the param list (the computing device's tier), gathered groups included
  std::unique_ptr<Allocator> optimizer_memory_;  // master copy, moments, accumulated gradients
  std::optional<ScopedDefaultAllocator> on_device_;  // with offload: the step's tensors in the device tier
  std::optional<memory::DynamicMemory> tier_;  // with offload: the device tier's, the lists' below
  std::optional<memory::ChunkManager> chunks_;
  std::optional<memory::ChunkManager> host_chunks_;  // memory.embedding_on_host: the embedding layer's
  std::optional<memory::ChunkManager> expert_chunks_;  // parallel.expert: this rank's experts
  memory::MoveStats reported_;  // moves up to the last step's record
  std::int64_t param_list_bytes_ = 0;
  config::Offload offload_ = config::Offload::none;
  memory::Eviction eviction_ = memory::Eviction::belady;
  std::int64_t steps_ = 0;
  int stage_ = 0;
  memory::ChunkFetch fetch_ = memory::ChunkFetch::all_gather;
  DType precision_ = DType::f32;
  bool enforce_device_limit_ = true;   // false: a probe reports the least device cap instead
  std::int64_t frozen_on_device_ = 0;  // a LoRA run's frozen base on the device tier (finetune.base_offload = "none")
  bool device_limit_checked_ = false;
};

}  // namespace

std::unique_ptr<ModelData> make_model_data(const config::Config& cfg, models::Model& model,
                                           pipeline::PipelineEngine& engine, parallel::ParallelContext& pc,
                                           nn::Runner& runner, const std::string& resume_path,
                                           bool enforce_device_limit) {
  if (!config::keeps_chunks(cfg)) {
    if (cfg.train.device == Device::Kind::cuda) {
      for (nn::Parameter* p : engine.parameters()) {
        p->data = p->data.clone(gpu_allocator());
        p->grad = Tensor::zeros(p->shape, DType::f32, gpu_allocator());
      }
    }
    return std::make_unique<TensorModelData>(cfg, engine, pc, runner, resume_path);
  }
  const std::int64_t local = cfg.train.batch_size / pc.layout().spec().data;
  const std::int64_t micro = cfg.train.micro_batch_size ? cfg.train.micro_batch_size : local;
  return std::make_unique<ChunkModelData>(cfg, model, engine, pc, runner, resume_path, local / micro,
                                          enforce_device_limit);
}

}  // namespace tidal::engine
