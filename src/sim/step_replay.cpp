#include "sim/step_replay.h"

#include "comm/counting_communicator.h"
#include "core/dtype.h"
#include "data/data_options.h"
#include "distributed/rank_chunks.h"
#include "memory/frozen_stream.h"
#include "models/lora.h"
#include "models/registry.h"
#include "nn/runner.h"
#include "ops/meta/recorder.h"
#include "parallel/layout.h"
#include "pipeline/schedule.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

namespace tidal::sim {
namespace {

// What the real modules tell the planner as they run on meta tensors (ops/meta/recorder.h): the
// step's memory (a pool counted as the trainer's activation pool is: engine/trainer.cpp gives it a
// step's tensors and temporaries alone), and with costs the seconds of the products (a GEMM at the
// rate of its size for the precision, attention's at attention's rate) and of every tensor made,
// written once and read once at the elementwise ops' rate - an op's own copies of its operands
// excepted: their time is in the op's rate, which calibrate measures on such operands.
class MetaStep final : public ops::meta::Recorder {
 public:
  MetaStep(const DeviceOps& ops, const Costs* costs)
      : Recorder({.cpu = ops.cpu, .bf16_native = ops.bf16_native}), costs_(costs) {
    pool.observe = [this](std::size_t bytes) { made(double(bytes)); };
  }

  MetaAllocator pool;
  double gemm_seconds = 0, attention_seconds = 0, made_seconds = 0;

  void gemm(DType, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch) override {
    if (!costs_ || m == 0 || n == 0 || k == 0) return;
    const double M = double(m), N = double(n), K = double(k);
    gemm_seconds += double(batch) * 2 * M * N * K / costs_->hardware->gemm_rate(costs_->dtype, M, N, K);
  }
  void attention(DType, double flops, std::int64_t keys) override {
    if (costs_) attention_seconds += flops / costs_->hardware->attention_rate(costs_->dtype, double(keys));
  }
  void workspace(bool begin) override { workspaces_ += begin ? 1 : -1; }

  // A gradient buffer the model data keeper hands a backward (memory/chunk_manager.cpp's access):
  // a memset, its bytes written once - a stream through memory, not a tensor an op makes.
  Tensor zeroed(const Shape& shape, DType dtype) {
    ++streams_;
    Tensor t = Tensor::zeros(shape, dtype, pool);
    --streams_;
    stream(double(t.nbytes()));
    return t;
  }
  // Bytes the keeper reads or writes once in a plain pass (a memset, a cast, an add), at the
  // memory's bandwidth (tidal calibrate's copy rate: bytes read and written a second).
  void stream(double bytes) {
    if (costs_) made_seconds += bytes / costs_->hardware->memory_bandwidth;
  }

 private:
  void made(double bytes) {
    if (!costs_ || workspaces_ > 0 || streams_ > 0 || bytes <= 0) return;
    const double element = double(dtype_size(costs_->dtype));
    made_seconds += 2 * bytes / costs_->hardware->elementwise_rate(costs_->dtype, bytes / element);
  }

  const Costs* costs_;
  int workspaces_ = 0, streams_ = 0;
};

// How a chunked parameter's gradient is stored (gradient_stores): the bytes an element's store
// reads and writes, and whether the backward adds into the fp32 grad list itself instead
// (memory::sums_in_place).
struct GradientStore {
  double bytes = 0;
  bool in_place = false;
};

// What the model data keeper does around the modules that the step's memory sees
// (engine/model_data.h): the chunk keeper hands a module's backward fresh zeroed gradients in the
// compute precision from the step's memory (memory/chunk_manager.cpp's access), or the fp32 grad
// list's slots where it sums in place, and takes each once its last user's backward on this rank
// is done, streaming it into the chunks (`store`); its parameters are views of the chunks, and
// the tensor keeper's fp32 parameters and gradients model data, held all along - neither in the
// step's memory.
// A frozen base's NF4 linears (`nf4`: their names) hold codes, which each product dequantizes into
// the step's memory (nn/linear.h).
class PlannedKeeper final : public nn::ModuleHooks {
 public:
  PlannedKeeper(models::Model& model, const pipeline::PipelineEngine& engine, bool chunks, DType compute,
                const std::set<std::string>& nf4, MetaStep& meta, std::map<const nn::Parameter*, GradientStore> store)
      : model_(model), chunks_(chunks), compute_(chunks ? compute : DType::f32), meta_(meta), store_(std::move(store)) {
    for (nn::Module* layer : engine.layers()) layer->count_parameter_users(users_);
    for (nn::Parameter* p : model_.parameters()) {
      if (p->frozen && nf4.count(p->name)) {
        p->nf4 = std::make_shared<const ops::Nf4Weight>(ops::nf4_shaped(p->shape, meta_allocator()));
        continue;
      }
      p->data = Tensor::empty(p->shape, p->frozen ? compute : compute_, meta_allocator());
      p->grad = chunks_ || p->frozen ? Tensor() : Tensor::empty(p->shape, DType::f32, meta_allocator());
    }
    left_ = users_;
  }
  ~PlannedKeeper() override {
    for (nn::Parameter* p : model_.parameters()) {  // shapes again
      p->data = p->grad = Tensor();
      p->nf4.reset();
    }
  }
  PlannedKeeper(const PlannedKeeper&) = delete;
  PlannedKeeper& operator=(const PlannedKeeper&) = delete;

  void before_backward(nn::Module& m) override {
    if (!chunks_) return;
    for (nn::Parameter* p : m.used_parameters())
      if (!p->grad.defined() && !p->frozen) p->grad = gradient_buffer(p);
  }
  void after_backward(nn::Module& m) override {
    if (!chunks_) return;
    for (nn::Parameter* p : m.used_parameters())
      if (!p->frozen) complete_use(p);
  }
  // B and W: a deferred gradient's buffer goes after B and comes again for its W pass.
  void after_input_gradient(nn::Module& m, std::span<nn::Parameter* const> deferred) override {
    if (!chunks_) return;
    for (nn::Parameter* p : m.used_parameters()) {
      if (p->frozen) continue;
      if (std::find(deferred.begin(), deferred.end(), p) == deferred.end()) complete_use(p);
      else p->grad = Tensor();
    }
  }
  void before_weight_gradient(nn::Module&, std::span<nn::Parameter* const> deferred) override {
    if (!chunks_) return;
    for (nn::Parameter* p : deferred) p->grad = gradient_buffer(p);
  }
  void after_weight_gradient(nn::Module&, std::span<nn::Parameter* const> deferred) override {
    if (!chunks_) return;
    for (nn::Parameter* p : deferred) stored(p);
  }

 private:
  void complete_use(nn::Parameter* p) {
    if (--left_.at(p) > 0) return;
    stored(p);
    left_[p] = users_.at(p);
  }
  void stored(nn::Parameter* p) {
    if (auto it = store_.find(p); it != store_.end()) meta_.stream(it->second.bytes * double(p->shape.numel()));
    p->grad = Tensor();
  }
  // A backward's gradient buffer: in the step's memory, zeroed; or the grad list's slot (model data).
  Tensor gradient_buffer(const nn::Parameter* p) {
    if (auto it = store_.find(p); it != store_.end() && it->second.in_place)
      return Tensor::empty(p->shape, DType::f32, meta_allocator());
    return meta_.zeroed(p->shape, compute_);
  }

  models::Model& model_;
  const bool chunks_;
  const DType compute_;
  MetaStep& meta_;
  const std::map<const nn::Parameter*, GradientStore> store_;
  std::map<nn::Parameter*, int> users_, left_;
};

// The bytes each element of a chunked parameter's gradient streams through memory once its
// backward is done, a micro-batch (memory/chunk_manager.cpp): its store (store_gradient) and its
// share of its chunk group's passes (reduce_group), spread over the group's elements (chunks hold
// parameters but for their padding). Of `e` bytes an element in the compute precision, `sum` the
// bytes of adding one into an fp32 sum (add_into: read, and the sum read and written; from another
// precision by way of an fp32 copy, written and read):
// - one micro-batch: cast into its param slot (read, written); over a group of ranks the group is
//   packed into a buffer (read, written) and its sum unpacked back (read, written), or sharded
//   reduced from the packed buffer - under offload by a ring that adds each other rank's partial
//   into the chunks (g - 1 of g read twice and written);
// - micro-batches summed on the rank (alone, or at stages 0 and 1 without offload): added into the
//   grad list, on a CPU planned for by the backward's own products (memory::sums_in_place: none
//   here);
//   sharded, the list's owned sums copied back once a step (8 bytes, 1 / g of them);
// - micro-batches reduced each (stages 2 and 3, offload): added into the group's buffer, zeroed
//   first (e written; e + e read, e written), and the reduced sum (the owned 1 / g when sharded)
//   added into the grad list.
std::map<const nn::Parameter*, GradientStore> gradient_stores(const Job& job, const PlannedRank& rank,
                                                              int micro_batches, Device compute) {
  std::map<const nn::Parameter*, GradientStore> out;
  const double e = double(dtype_size(job.precision));
  const double sum = e + 8 + (job.precision == DType::f32 ? 0 : 8);
  const bool accumulate = micro_batches > 1;
  const bool local = memory::sums_micro_batches_locally(job.chunk_options_for(accumulate));
  for (const PlannedChunkList& list : rank.chunk_lists) {
    const double g = double(rank.pc->layout().group(list.group, rank.pc->rank()).size());
    const bool distributed = g > 1, sharded = distributed && job.zero_stage() > 0;
    const bool in_place = memory::sums_in_place(job.chunk_options_for(accumulate), distributed, compute);
    double bytes = 0;
    if (!accumulate)
      bytes = 2 * e + (!distributed  ? 0
                       : !sharded    ? 4 * e
                       : job.offloaded() ? 3 * e * (g - 1) / g
                                         : 2 * e);
    else if (!distributed || local)
      bytes = (in_place ? 0 : sum) + (sharded ? 8 / g / micro_batches : 0);
    else
      bytes = 4 * e + (sharded ? sum / g : sum);
    for (const nn::Parameter* p : list.params.params) out[p] = {.bytes = bytes, .in_place = in_place};
  }
  return out;
}

// What the trainer and the model data keeper communicate once a step, beside the layers
// (engine/trainer.cpp, engine/model_data.cpp, memory/chunk_manager.cpp, pipeline/engine.cpp).
// The part that runs beside backward: its seconds, the share of them that starts only after
// backward's last op, and the backwards it is spread over (StepReplay::overlappable,
// overlap_tail, overlap_passes).
struct Overlap {
  double seconds = 0, tail = 0;
  int passes = 1;
};

// The groups a rank's step-level collectives run over.
struct StepGroups {
  int data, pipeline, tensor;
  parallel::GroupKind chunk_kind;  // the model data's: data, or data x sequence
  int group;                       // its size
  std::string chunk_group;         // its name
};

StepGroups step_groups(const PlannedRank& rank) {
  const parallel::ParallelContext& pc = *rank.pc;
  const parallel::Layout& layout = pc.layout();
  const auto size = [&](parallel::GroupKind kind) { return int(layout.group(kind, pc.rank()).size()); };
  const parallel::GroupKind chunk_kind = distributed::chunk_group_kind(pc);
  return {.data = layout.spec().data,
          .pipeline = size(parallel::GroupKind::pipeline),
          .tensor = size(parallel::GroupKind::tensor),
          .chunk_kind = chunk_kind,
          .group = size(chunk_kind),
          .chunk_group = std::string(parallel::group_name(chunk_kind))};
}

// The fp32 tensor keeper's: the bucketed all-reduce (distributed/gradient_reducer.h: parameters in
// reverse order, a bucket closed once it holds parallel.bucket_mb), a grid's replicated blocks
// and a table tied at the pipeline's ends, then the gradient norm's sums.
Overlap tensor_keeper_collectives(const Job& job, const PlannedRank& rank, const StepGroups& g,
                                  Traffic& traffic) {
  const parallel::Layout& layout = rank.pc->layout();
  double buckets = 0, last = 0;  // seconds: every bucket's, the last one's
  // A mixture's experts under expert parallelism are summed over the ranks holding the same
  // experts, in buckets of their own (engine/model_data.cpp), the rest over the chunk group.
  const int expert_data = int(layout.group(parallel::GroupKind::expert_data, rank.pc->rank()).size());
  for (const bool experts : {false, true}) {
    const int size = experts ? expert_data : g.group;
    const std::string name = experts ? "expert_data" : g.chunk_group;
    if (size == 1) continue;
    const double start = traffic.seconds();
    const double bucket_bytes = std::floor(job.bucket_mb * 1024 * 1024);
    const std::vector<nn::Parameter*>& params = rank.engine->parameters();
    double bytes = 0, elements = 0;
    bool open = false;
    for (auto it = params.rbegin(); it != params.rend(); ++it) {
      if (((*it)->expert_group != nullptr) != experts) continue;
      if (open && bytes >= bucket_bytes) {
        traffic.add(name, size, "all_reduce", elements, 4);
        bytes = elements = 0;
      }
      open = true;
      elements += double((*it)->shape.numel());
      bytes += 4 * double((*it)->shape.numel());
    }
    const double before_last = traffic.seconds();
    if (open) traffic.add(name, size, "all_reduce", elements, 4);
    buckets += traffic.seconds() - start;
    if (!experts) last = traffic.seconds() - before_last;
  }
  // A grid's replicated blocks (nn/tp/shard.h's reduce_replicated_gradients): one flat all-reduce
  // per level and group.
  std::map<std::pair<std::size_t, std::string>, std::pair<int, double>> replicated;
  for (const nn::Parameter* p : rank.engine->parameters())
    for (std::size_t level = 0; level < p->replicas.size(); ++level)
      if (p->replicas[level]->size() > 1) {
        auto& [n, elements] = replicated[{level, p->replicas[level]->name()}];
        n = p->replicas[level]->size();
        elements += double(p->shape.numel());
      }
  for (const auto& [key, figures] : replicated) traffic.add(key.second, figures.first, "all_reduce", figures.second, 4);
  const int ends = int(layout.group(parallel::GroupKind::pipeline_ends, rank.pc->rank()).size());
  for (const nn::Parameter* p : rank.engine->parameters())  // tied at the pipeline's ends
    if (layout.spec().pipeline > 1 && rank.engine->tied(*p))
      traffic.add("pipeline_ends", ends, "all_reduce", double(p->shape.numel()), 4);
  traffic.add("tensor", g.tensor, "all_reduce", 1, 4);  // the gradient norm's sum
  const auto expert = std::find_if(rank.engine->parameters().begin(), rank.engine->parameters().end(),
                                   [](const nn::Parameter* p) { return p->expert_group != nullptr; });
  if (expert != rank.engine->parameters().end()) {  // the experts' part of it, over their group too
    traffic.add("tensor", g.tensor, "all_reduce", 1, 4);
    traffic.add("expert", (*expert)->expert_group->size(), "all_reduce", 1, 4);
  }
  traffic.add("pipeline", g.pipeline, "all_reduce", 1, 4);
  // The last bucket (the first parameters') is complete only when backward is: it starts after.
  return {.seconds = buckets, .tail = buckets > 0 ? last / buckets : 0.0};
}

// The chunk keeper's group sums and gathers (memory/chunk_manager.h) of one list over its group
// (`name`, `group` ranks).
Overlap chunk_group_collectives(const Job& job, const memory::ChunkLayout& chunks, const std::string& name,
                                int group, int micro_batches, Traffic& traffic) {
  const double C = double(chunks.chunk_elements), e = double(dtype_size(job.precision));
  const int groups = chunks.chunks / chunks.group_size, stage = job.zero_stage();
  const bool accumulate = micro_batches > 1;
  const bool offload = job.offloaded();
  Overlap overlap;
  // Each chunk group's gradients summed once it is complete (every micro-batch's at stages 2 and 3
  // or under offload): all of them at stage 0, each rank's own chunk when sharded - under offload
  // by a ring of sends straight between the chunks' payloads. At stages 0 and 1 with chunks that
  // stay put, each rank sums its micro-batches in a grad list of every chunk, whose groups are
  // reduced in fp32 once, beside the last micro-batch's backward.
  const bool local_sums = memory::sums_micro_batches_locally(job.chunk_options_for(accumulate));
  const double reductions = double(groups) * (accumulate && !local_sums ? micro_batches : 1);
  const bool ring = offload && stage > 0;
  const double start = traffic.seconds();
  if (ring) {
    traffic.add(name, group, "send", C, e, reductions * (group - 1));
    traffic.add(name, group, "recv", C, e, reductions * (group - 1));
  } else if (local_sums) {  // fp32, once a step
    traffic.add(name, group, stage > 0 ? "reduce_scatter" : "all_reduce", group * C, 4, reductions);
  } else {
    traffic.add(name, group, stage > 0 ? "reduce_scatter" : "all_reduce", group * C, e, reductions);
  }
  // Without offload each group's sum runs beside the backward of the groups after it
  // (memory/chunk_manager.h: one in flight); the last group's, after backward (with micro-batches
  // at stages 2 and 3, after each micro-batch's).
  if (!offload && groups > 0)
    overlap = {.seconds = traffic.seconds() - start,
               .tail = 1.0 / groups,
               .passes = accumulate && !local_sums ? micro_batches : 1};
  // The chunks other ranks updated, gathered: after the step (stages 1, 2), or for each forward and
  // backward (stage 3).
  const double gathers = stage == 1 || stage == 2 ? groups
                         : stage == 3            ? double(2 * groups) * micro_batches
                                                 : 0.0;
  if (ring) {
    traffic.add(name, group, "send", C, e, gathers * (group - 1));
    traffic.add(name, group, "recv", C, e, gathers * (group - 1));
  } else {
    traffic.add(name, group, "all_gather", C, e, gathers, group * C);
  }
  return overlap;
}

// A list's segments other ranks hold too (a tied table at the pipeline's ends, a grid's
// replicas): their owned gradient chunks, one all-reduce per chunk, level by level. The first
// level's start as each group's sum is the step's, beside the rest of backward (not under
// offload): they join `overlap`, whose tail is still the last group's share.
void chunk_replica_collectives(const Job& job, const PlannedRank& rank, const PlannedChunkList& list,
                               bool accumulate, Traffic& traffic, Overlap& overlap) {
  const memory::ChunkLayout& chunks = list.layout;
  const double C = double(chunks.chunk_elements), e = double(dtype_size(job.precision));
  const int groups = chunks.chunks / chunks.group_size, stage = job.zero_stage();
  const bool offload = job.offloaded();
  const int index = rank.pc->layout().group_index(list.group, rank.pc->rank());
  std::map<std::pair<std::size_t, std::string>, std::pair<int, double>> replicas;  // (level, group) -> (size, chunks)
  for (std::size_t seg = 0; seg < list.params.segments.size(); ++seg) {
    const std::vector<comm::Communicator*>& levels = list.params.segments[seg].replicas;
    for (std::size_t level = 0; level < levels.size(); ++level) {
      if (levels[level]->size() == 1) continue;
      double owned = 0;
      for (int c = chunks.segment_chunks[seg]; c < chunks.segment_chunks[seg + 1]; ++c)
        if (stage == 0 || chunks.group_size == 1 || c % chunks.group_size == index) ++owned;
      auto& [n, count] = replicas[{level, levels[level]->name()}];
      n = levels[level]->size();
      count += owned;
    }
  }
  for (const auto& [key, figures] : replicas) {
    if (figures.second == 0) continue;
    const double start = traffic.seconds();
    traffic.add(key.second, figures.first, "all_reduce", C, accumulate ? 4 : e, figures.second);
    if (key.first == 0 && !offload && groups > 0)
      overlap = {.seconds = overlap.seconds + traffic.seconds() - start, .tail = 1.0 / groups};
  }
}

Overlap step_collectives(const Job& job, const PlannedRank& rank, int micro_batches, Traffic& traffic) {
  const StepGroups g = step_groups(rank);
  traffic.add("pipeline", g.pipeline, "all_reduce", 1, 4);  // the pipeline's loss
  if (g.data > 1) traffic.add("data", g.data, "all_reduce", 1, 4, 2);  // the step's targets and loss over replicas
  // The routers' metrics (engine/expert_metrics.cpp): per block each expert's rows, the dropped
  // picks and two losses, summed over the world.
  const int world = rank.pc->world_size();
  if (const int experts = models::model_traits(job.model).experts; world > 1 && experts > 0)
    traffic.add("world", world, "all_reduce", double(job.model.n_layer) * (experts + 3), 4);
  if (!rank.model_data.chunks) return tensor_keeper_collectives(job, rank, g, traffic);
  // Each list over its group: the model's first, then the experts', whose sums all run beside the
  // backward of the layers before them (the tail stays the model's list's last group).
  Overlap overlap;
  for (const PlannedChunkList& list : rank.chunk_lists) {
    const parallel::Layout& layout = rank.pc->layout();
    const int size = int(layout.group(list.group, rank.pc->rank()).size());
    Overlap mine;
    if (size > 1)
      mine = chunk_group_collectives(job, list.layout, std::string(parallel::group_name(list.group)), size,
                                     micro_batches, traffic);
    chunk_replica_collectives(job, rank, list, micro_batches > 1, traffic, mine);
    if (&list == &rank.chunk_lists.front()) {
      overlap = mine;
    } else if (mine.seconds > 0) {
      overlap.tail = overlap.seconds * overlap.tail / (overlap.seconds + mine.seconds);
      overlap.seconds += mine.seconds;
    }
  }
  if (job.zero_stage() > 0 && g.group > 1) traffic.add(g.chunk_group, g.group, "all_reduce", 1, 4);  // the gradient norm
  if (rank.chunk_lists.size() > 1) {  // the experts' part of it: over their owners, then the expert group
    const parallel::Layout& layout = rank.pc->layout();
    const int owners = int(layout.group(parallel::GroupKind::expert_data, rank.pc->rank()).size());
    if (job.zero_stage() > 0 && owners > 1) traffic.add("expert_data", owners, "all_reduce", 1, 4);
    traffic.add("expert", int(layout.group(parallel::GroupKind::expert, rank.pc->rank()).size()), "all_reduce", 1, 4);
  }
  if (g.tensor > 1) traffic.add("tensor", g.tensor, "all_reduce", 1, 4);
  if (g.pipeline > 1) traffic.add("pipeline", g.pipeline, "all_reduce", 1, 4);
  return overlap;
}

// One rank's step replayed: its pipeline schedule's actions in order, each running its virtual
// stage's real layers (pipeline::PipelineEngine::run_forward / run_backward) on meta tensors, the
// stages' messages as the pipeline engine sends and receives them (pipeline/engine.cpp), then what
// the step adds after the actions. The layers' collectives and the messages are what the model's
// planned communicators counted (comm/planning_communicator.h).
class StepRun {
 public:
  StepRun(const Job& job, const PlannedRank& planned, const DeviceOps& ops, const Costs* costs,
          const ReplayOrder& order)
      : job_(job),
        order_(order),
        planned_(planned),
        costs_(costs),
        layout_(planned.pc->layout()),
        compute_(ops.cpu ? Device::cpu() : Device::cuda()),
        meta_(ops, costs),
        pc_(*planned.model_pc),
        model_(*planned.model),
        engine_(*planned.engine),
        pipeline_(layout_.spec().pipeline),
        stage_(layout_.coordinates(planned.pc->rank()).pipeline),
        last_(pipeline_ * engine_.chunks() - 1) {
    if (costs) out_.traffic = Traffic(costs->link);
  }

  StepReplay run() {
    const std::int64_t micro = job_.micro_batch();
    const int micro_batches = int(job_.local_batch() / micro);
    // The batches: on the host beside a CPU's step, in the step's memory on a GPU (engine/trainer.cpp).
    Allocator& batch_memory =
        job_.device() == Device::Kind::cuda ? static_cast<Allocator&>(meta_.pool) : meta_allocator();
    for (int m = 0; m < micro_batches; ++m) batches_.push_back(data::shaped_batch(job_.data, micro, batch_memory));
    for (int m = 0; m < micro_batches; ++m)
      states_.push_back({.runner = &runner_, .training = true, .seed = job_.seed, .first_sample = m * micro,
                         .batch = &batches_[std::size_t(m)], .activations = &meta_.pool});
    PlannedKeeper keeper(model_, engine_, planned_.model_data.chunks, job_.precision,
                         job_.nf4_base ? models::linear_weights(job_.model) : std::set<std::string>{}, meta_,
                         gradient_stores(job_, planned_, micro_batches, compute_));
    message_ = hidden_state();
    runner_.add_hooks(&keeper);
    // finetune.base_offload = "host" or "disk": each module's frozen weights fetched into the step's
    // memory (from meta memory here, whichever it is).
    std::optional<memory::FrozenBaseStream> base_stream;
    if (job_.base_offload != config::BaseOffload::none) {
      base_stream.emplace(engine_.frozen_parameters());
      runner_.add_hooks(&*base_stream);
    }
    const ScopedDefaultAllocator temporaries(meta_.pool);
    const ops::meta::ScopedRecorder recording(meta_);
    meta_.pool.reset_peak();
    counted_ = counted();
    const std::vector<pipeline::Action> actions =
        pipeline::schedule(order_.kind.value_or(job_.schedule), pipeline_, stage_, micro_batches,
                           engine_.chunks(), order_.held_weight_gradients);
    for (std::size_t i = 0; i < actions.size(); ++i)
      run_action(actions[i], i + 1 < actions.size() ? &actions[i + 1] : nullptr);
    lap();
    out_.peak_bytes = double(meta_.pool.peak_bytes());
    after_actions(micro_batches);
    return std::move(out_);
  }

 private:
  // The seconds since the last mark: GEMMs, attention, the tensors made, the layers' collectives
  // (those alone: lap_comm_).
  struct Mark {
    double gemm = 0, attention = 0, made = 0, comm = 0;
  };
  using Stream = std::pair<int, bool>;  // (virtual stage, backward) of a message's receiver
  using Counted = std::map<std::pair<std::string, std::string>, comm::OperationStats>;

  // What the model's communicators have counted so far, by (group, operation).
  Counted counted() const {
    Counted out;
    for (parallel::GroupKind kind : parallel::kAllGroupKinds) {
      const auto& group = dynamic_cast<const comm::CountingCommunicator&>(pc_.group(kind));
      for (const auto& [op, stats] : group.stats()) out[{std::string(group.name()), op}] = stats;
    }
    return out;
  }
  // Adds what they counted since the last call to the step's traffic.
  void absorb() {
    const Counted now = counted();
    for (const auto& [key, stats] : now) {
      comm::OperationStats since = stats;
      if (auto it = counted_.find(key); it != counted_.end()) {
        since.calls -= it->second.calls;
        since.elements -= it->second.elements;
        since.bytes_sent -= it->second.bytes_sent;
        since.link_bytes -= it->second.link_bytes;
      }
      const int size = sizes_.count(key.first) ? sizes_.at(key.first) : group_size(key.first);
      out_.traffic.add_counted(key.first, size, key.second, since);
    }
    counted_ = now;
  }
  int group_size(const std::string& name) {
    for (parallel::GroupKind kind : parallel::kAllGroupKinds)
      if (pc_.group(kind).name() == name) return sizes_[name] = pc_.group(kind).size();
    return 1;
  }

  Mark now() const { return {meta_.gemm_seconds, meta_.attention_seconds, meta_.made_seconds, out_.traffic.seconds()}; }
  double lap() {
    absorb();
    lap_comm_ = 0;
    if (!costs_) return 0.0;
    const double gemm = meta_.gemm_seconds - mark_.gemm, attention = meta_.attention_seconds - mark_.attention;
    const double memory = meta_.made_seconds - mark_.made;
    const double comm = out_.traffic.seconds() - mark_.comm;
    out_.gemm_seconds += gemm;
    out_.attention_seconds += attention;
    out_.memory_seconds += memory;
    out_.layer_comm_seconds += comm;
    lap_comm_ = comm;
    mark_ = now();
    return gemm + attention + memory + comm;
  }

  // The hidden state the stages pass on (the model's layers before its first block, run once
  // outside the step's count): its shape and type are every message's.
  Tensor hidden_state() {
    MetaAllocator scratch;
    nn::StepState state = states_.front();
    state.activations = &scratch;
    state.training = false;
    const ScopedDefaultAllocator temporaries(scratch);
    nn::Context ctx(state);
    Tensor x = model_.input(*state.batch);
    for (int i = 0; i < model_.first_block_layer(); ++i)
      x = ctx.forward(*model_.layers()[std::size_t(i)], x, std::size_t(i));
    return Tensor::empty(x.shape(), x.dtype(), meta_allocator());
  }

  // pipeline/engine.cpp: each stream's first message is preceded by a header; 1D tensor
  // parallelism sends 1/t of a message (scatter-gather) and the receiver all-gathers it.
  static constexpr std::int64_t kHeader = 9;
  comm::Communicator& pipeline_group() const { return pc_.group(parallel::GroupKind::pipeline); }
  comm::Communicator& tensor_group() const { return pc_.group(parallel::GroupKind::tensor); }
  std::int64_t payload(std::int64_t n) const {
    const int t = tensor_group().size();
    return engine_.scatter_gather() && n % t == 0 ? n / t : n;
  }
  void send(const Tensor& y, Stream stream) {
    if (engine_.stage_of(stream.first) == stage_) {  // ZB-V's turn: handed over within the rank
      handed_[stream] = y;
      return;
    }
    if (sent_.insert(stream).second) {
      Tensor header = Tensor::empty({kHeader}, DType::i32, meta_allocator());
      pipeline_group().send(header, 0);
    }
    const Tensor whole = (y.is_contiguous() ? y : y.clone()).reshape({y.numel()});
    pipeline_group().send(whole.slice(0, 0, payload(y.numel())), 0);
  }
  void post(Stream stream) {
    Tensor buffer = Tensor::empty({payload(message_.numel())}, message_.dtype(), meta_.pool);
    pipeline_group().recv(buffer, 0);
    posted_[stream] = buffer;
  }
  Tensor receive(Stream stream) {
    if (const auto it = handed_.find(stream); it != handed_.end()) {
      Tensor t = std::move(it->second);
      handed_.erase(it);
      return t;
    }
    if (known_.insert(stream).second) {
      Tensor header = Tensor::empty({kHeader}, DType::i32, meta_allocator());
      pipeline_group().recv(header, 0);
    }
    if (!posted_.count(stream)) post(stream);
    Tensor buffer = posted_.at(stream);
    posted_.erase(stream);
    if (buffer.numel() == message_.numel()) return buffer.reshape(message_.shape());
    Tensor whole = Tensor::empty({message_.numel()}, buffer.dtype(), meta_.pool);
    tensor_group().all_gather(whole, buffer);
    return whole.reshape(message_.shape());
  }
  std::optional<Stream> input_of(const pipeline::Action& a) const {
    const int vs = engine_.virtual_stage(a.chunk);
    if (a.kind == pipeline::Action::forward) return vs == 0 ? std::nullopt : std::optional(Stream{vs, false});
    if (a.kind == pipeline::Action::weight_gradient) return std::nullopt;
    return vs == last_ ? std::nullopt : std::optional(Stream{vs, true});
  }

  // One action of the schedule: its input received, the next action's receive posted, its
  // virtual stage's layers run, its output sent.
  void run_action(const pipeline::Action& a, const pipeline::Action* next_action) {
    const int vs = engine_.virtual_stage(a.chunk);
    lap();  // receives and sends are the schedule's waits, not the action's work
    Tensor input;
    if (const auto stream = input_of(a)) input = receive(*stream);
    if (next_action)
      if (const auto next = input_of(*next_action); next && known_.count(*next) && !posted_.count(*next)) post(*next);
    absorb();
    mark_ = now();
    if (a.kind == pipeline::Action::forward) {
      const nn::StepState& state = states_[std::size_t(a.micro_batch)];
      auto ctx = std::make_unique<nn::Context>(state);
      const double before = double(meta_.pool.current_bytes());
      Tensor y = engine_.run_forward(vs, vs == 0 ? model_.input(*state.batch) : input, *ctx);
      const double seconds = lap();
      out_.actions.push_back(
          {.forward = true, .micro_batch = a.micro_batch, .chunk = a.chunk, .seconds = seconds, .comm = lap_comm_});
      if (vs != last_) send(y, {vs + 1, false});
      input = y = Tensor();
      live_[{a.micro_batch, a.chunk}] = std::move(ctx);
      out_.kept_per_micro_batch = std::max(out_.kept_per_micro_batch, double(meta_.pool.current_bytes()) - before);
    } else if (a.kind == pipeline::Action::weight_gradient) {
      auto it = weight_gradients_.find({a.micro_batch, a.chunk});
      const double before = double(meta_.pool.current_bytes());
      for (const std::function<void()>& pass : it->second.passes) pass();
      const double seconds = lap();
      out_.actions.push_back({.forward = false, .weight = true, .micro_batch = a.micro_batch, .chunk = a.chunk,
                              .seconds = seconds, .comm = lap_comm_});
      weight_gradients_.erase(it);
      out_.held_weight_bytes = std::max(out_.held_weight_bytes, before - double(meta_.pool.current_bytes()));
    } else {
      auto it = live_.find({a.micro_batch, a.chunk});
      nn::StepState& state = states_[std::size_t(a.micro_batch)];
      if (a.kind == pipeline::Action::input_gradient)
        state.weight_gradients = &weight_gradients_[{a.micro_batch, a.chunk}];
      Tensor dx = engine_.run_backward(vs, vs == last_ ? Tensor::full({1}, 1.0f) : input, *it->second);
      state.weight_gradients = nullptr;
      const double seconds = lap();
      out_.actions.push_back(
          {.forward = false, .micro_batch = a.micro_batch, .chunk = a.chunk, .seconds = seconds, .comm = lap_comm_});
      if (vs > 0) send(dx, {vs - 1, true});
      input = dx = Tensor();
      live_.erase(it);
    }
  }

  // The step's collectives beside the layers, and with costs the optimizer's pass: the gradient
  // norm's read of this rank's share of the gradients (4 bytes a parameter), then AdamW's over it
  // (the fp32 parameters or master copy, gradient and two moments read, three written back; the
  // chunks' compute-precision copy written too). Clipping folds into the update.
  void after_actions(int micro_batches) {
    const double before = out_.traffic.seconds();
    const Overlap overlap = step_collectives(job_, planned_, micro_batches, out_.traffic);
    out_.overlappable = overlap.seconds;
    out_.overlap_tail = overlap.tail;
    out_.overlap_passes = overlap.passes;
    out_.after_actions = out_.traffic.seconds() - before - out_.overlappable;
    if (!costs_) return;
    const ModelDataBytes& md = planned_.model_data;
    const double owned = md.chunks ? double(md.owned_elements) : double(md.parameters);
    out_.optimizer = owned * (4 + 28 + (md.chunks ? double(dtype_size(job_.precision)) : 0.0)) /
                     costs_->hardware->optimizer_bandwidth;
  }

  const Job& job_;
  const ReplayOrder order_;
  const PlannedRank& planned_;
  const Costs* costs_;
  const parallel::Layout& layout_;
  const Device compute_;  // where the step's ops run: the planned hardware's (sim::DeviceOps)
  MetaStep meta_;
  parallel::ParallelContext& pc_;
  models::Model& model_;
  pipeline::PipelineEngine& engine_;
  const int pipeline_, stage_, last_;  // stages, this rank's, the last virtual stage
  nn::Runner runner_;
  std::vector<nn::Batch> batches_;
  std::vector<nn::StepState> states_;
  StepReplay out_;
  Mark mark_;
  double lap_comm_ = 0;
  Counted counted_;
  std::map<std::string, int> sizes_;
  Tensor message_;  // the hidden state the stages send each other (its shape and type)
  std::map<std::pair<int, int>, std::unique_ptr<nn::Context>> live_;  // (micro-batch, chunk) -> its forward's context
  // (micro-batch, chunk) -> the weight gradients its B left for its W (zero-bubble schedules)
  std::map<std::pair<int, int>, nn::WeightGradients> weight_gradients_;
  std::set<Stream> known_, sent_;
  std::map<Stream, Tensor> posted_;
  std::map<Stream, Tensor> handed_;  // ZB-V's turn at the last rank
};

}  // namespace

StepReplay replay_step(const Job& job, const PlannedRank& planned, const DeviceOps& ops,
                       const Costs* costs, const ReplayOrder& order) {
  return StepRun(job, planned, ops, costs, order).run();
}

}  // namespace tidal::sim
