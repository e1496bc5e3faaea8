#include "sim/planned_world.h"

#include "distributed/rank_chunks.h"
#include "models/factory.h"
#include "nn/on_host.h"
#include "ops/nf4.h"
#include "nn/parallel_layers.h"
#include "pipeline/stage_costs.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace tidal::sim {

nlohmann::json ModelDataBytes::json() const {
  nlohmann::json out = {{"keeper", chunks ? "chunks" : "tensors"},
                        {"parameters", parameters},
                        {"param_bytes", param_bytes},
                        {"optimizer_bytes", optimizer_bytes},
                        {"model_data_bytes", lists()},
                        {"peak_bytes", peak()}};
  if (chunks) {
    out["chunk_elements"] = chunk_elements;
    out["chunks"] = chunks_in_lists;
  }
  if (embedding_on_host_bytes) out["embedding_on_host_bytes"] = embedding_on_host_bytes;
  if (frozen_bytes) out["frozen_bytes"] = frozen_bytes;
  if (frozen_bytes && frozen_on != config::BaseOffload::none) out["frozen_on"] = std::string(config::name_of(frozen_on));
  if (offload) {
    out["offload_host_bytes"] = offload_host_bytes;
    out["state_lists"] = nlohmann::json::array();
    for (const StateList& l : state_lists)
      out["state_lists"].push_back({{"chunks", l.chunks}, {"chunk_bytes", l.bytes}});
  }
  return out;
}

int ModelDataBytes::state_chunks() const {
  int n = 0;
  for (const StateList& l : state_lists) n += l.chunks;
  return n;
}

namespace {

PlannedRank build_rank(const Job& job, int world_size, int rank, int ranks_per_node) {
  PlannedRank r;
  r.pc = std::make_unique<parallel::ParallelContext>(
      parallel::ParallelContext::planned(job.context, world_size, rank, ranks_per_node));
  r.model_pc = r.pc.get();
  r.layers = nn::make_layers(*r.pc, {.keep_gathered = job.keep_gathered});
  r.model = models::make_model(job.model, job.recompute, *r.layers, job.embedding_on_host);
  if (job.lora) models::attach_lora(*r.model, job.model, *job.lora);
  pipeline::PipelineOptions options{.unit_costs = {},
                                    .scatter_gather = job.scatter_gather,
                                    .schedule = job.schedule,
                                    .chunks = job.virtual_stages,
                                    .held_weight_gradients = {}};
  if (r.pc->layout().spec().pipeline > 1)
    options.unit_costs = pipeline::unit_costs(*r.model, job.partition == pipeline::PartitionBy::time
                                                            ? pipeline::PartitionBy::parameters
                                                            : job.partition);
  r.engine = std::make_shared<pipeline::PipelineEngine>(*r.model, *r.pc, options);
  for (const nn::Parameter* p : r.engine->parameters()) r.model_data.parameters += p->shape.numel();
  // A frozen base (finetune.method = "lora") in the compute precision on the device tier, its
  // linears in NF4 under finetune.base_dtype = "nf4" (ops/nf4.h).
  const std::set<std::string> nf4 = job.nf4_base ? models::linear_weights(job.model) : std::set<std::string>{};
  r.model_data.frozen_on = job.base_offload;
  for (const nn::Parameter* p : r.engine->frozen_parameters())
    r.model_data.frozen_bytes += nf4.count(p->name) ? ops::nf4_bytes(p->shape.numel())
                                                    : p->shape.numel() * std::int64_t(dtype_size(job.precision));
  return r;
}

// The param list's bytes beyond the rank's own chunks at their peak: other ranks' chunks fetched or
// gathered (ZeRO-3), a group packed for its reduction, micro-batches' pending sums, and under
// offload the one chunk a replicated segment's gradient passes through.
// `tied_here`: two of the rank's modules read one parameter (a head tied to the embedding's table).
std::int64_t transient_param_bytes(const Job& job, const memory::ChunkOptions& options,
                                   const memory::ChunkLayout& layout, int group_size, bool replicated,
                                   bool tied_here) {
  const std::int64_t chunk_bytes = layout.chunk_elements * std::int64_t(dtype_size(options.compute_dtype));
  std::int64_t bytes = 0;
  if (group_size > 1 && options.offload && job.zero_stage() == 3) {
    // Under offload, ZeRO-3 fetches the other ranks' chunks of the group in use into the device
    // tier's chunk share (no group buffer: memory/chunk_manager.cpp's ring), a tied head's
    // table's group held from its backward to the embedding's.
    bytes = std::int64_t(group_size - 1) * chunk_bytes * std::min(layout.chunks / group_size, tied_here ? 2 : 1);
  }
  if (group_size > 1 && !options.offload) {
    // A group's chunks, packed for its all-reduce or reduce-scatter (with micro-batches at
    // stages 2 and 3: the pending sums, and the owned chunk's); under ZeRO-3 the group being
    // used gathered beside it, and a table used at both ends of the model (a tied head) held
    // from its backward to the embedding's.
    const std::int64_t group_bytes = std::int64_t(group_size) * chunk_bytes;
    // Micro-batches summed locally: no buffer at stage 0, whose grad list is all-reduced where it
    // lies; at stage 1 the gather after the step's (the owned chunk's fp32 sum is no larger).
    bytes = options.accumulate && job.zero_stage() == 0 ? 0 : group_bytes;
    // Micro-batches at stages 2 and 3: a group's pending sums in flight (and its owned chunk's)
    // while the next group's fill a buffer of their own; at stage 3 in the place of the remote
    // chunks the reduced group has let go (measured: the peak stays where it was).
    if (options.accumulate && !memory::sums_micro_batches_locally(options))
      bytes += chunk_bytes + (job.zero_stage() != 3 && layout.chunks / group_size > 1 ? group_bytes : 0);
    if (job.zero_stage() == 3) bytes += group_bytes * std::min(layout.chunks / group_size, tied_here ? 2 : 1);
  }
  // After backward, under offload, each owned gradient chunk of the segments other ranks hold too
  // goes through one chunk of the device tier for its all-reduce (ChunkManager::reduce_replicas);
  // without offload they are summed where they lie.
  if (options.offload && replicated)
    bytes = std::max(bytes, layout.chunk_elements * std::int64_t(options.accumulate ? 4 : dtype_size(options.compute_dtype)));
  return bytes;
}

// How `params` lie in chunks of `o`'s size over its group.
memory::ChunkLayout layout_of(const memory::ChunkParameters& params, const memory::ChunkOptions& o) {
  std::vector<std::int64_t> numels;
  for (const nn::Parameter* p : params.params) numels.push_back(p->shape.numel());
  return memory::layout_chunks(numels, o.chunk_elements, o.group->size(), params.segment);
}

// A rank's parameters by the chunk lists that keep them (engine/model_data.cpp's ChunkModelData):
// the device's, under memory.embedding_on_host the embedding's, and under parallel.expert the
// experts' (shared by the data ranks holding the same experts).
struct RankLists {
  memory::ChunkParameters device, host, experts;
};

// Each rank's lists, one set per model (ranks sharing a model lay their lists out alike).
std::vector<std::shared_ptr<const RankLists>> rank_lists(const std::vector<PlannedRank>& world) {
  std::map<const models::Model*, std::shared_ptr<const RankLists>> by_model;
  std::vector<std::shared_ptr<const RankLists>> out;
  for (const PlannedRank& r : world) {
    std::shared_ptr<const RankLists>& lists = by_model[r.model.get()];
    if (!lists) {
      const std::vector<nn::Parameter*> embedding = nn::parameters_on_host(*r.model);
      std::vector<nn::Parameter*> on_host, on_device, experts;
      for (nn::Parameter* p : r.engine->parameters())
        (std::find(embedding.begin(), embedding.end(), p) != embedding.end() ? on_host
         : p->expert_group != nullptr                                       ? experts
                                                                            : on_device)
            .push_back(p);
      lists = std::make_shared<const RankLists>(RankLists{distributed::chunk_parameters(on_device, *r.engine, *r.pc),
                                                          distributed::chunk_parameters(on_host, *r.engine, *r.pc),
                                                          distributed::chunk_parameters(experts, *r.engine, *r.pc)});
    }
    out.push_back(lists);
  }
  return out;
}

// A list of `params` on rank `r` over its ranks of `kind` at `o`'s chunk size: its layout (in
// r.chunk_lists), its bytes (param and optimizer) counted in r's model data (under offload, on the
// host at the start, and its optimizer states' chunks), and its place in the step beyond them.
// `tied_here`: two of the rank's modules read one parameter.
memory::ChunkListBytes plan_list(const Job& job, PlannedRank& r, const memory::ChunkParameters& params,
                                 memory::ChunkOptions o, parallel::GroupKind kind, bool tied_here) {
  ModelDataBytes& m = r.model_data;
  o.group = &r.pc->group(kind);
  const memory::ChunkLayout layout = layout_of(params, o);
  const memory::ChunkListBytes bytes = memory::chunk_list_bytes(layout, o);
  m.param_bytes += bytes.param;
  m.optimizer_bytes += bytes.optimizer;
  m.owned_elements += memory::list_share(layout, o).optimizer * layout.chunk_elements;
  bool replicated = false;  // segments other ranks hold too (their gradients all-reduced)
  for (const memory::ChunkSegment& seg : params.segments)
    for (const comm::Communicator* g : seg.replicas) replicated = replicated || g->size() > 1;
  m.param_transient_bytes += transient_param_bytes(job, o, layout, o.group->size(), replicated, tied_here);
  r.chunk_lists.push_back({.params = params, .layout = layout, .group = kind});
  if (o.offload) {
    // Every list starts on the host; under the static partition the param list too, until its
    // chunks move to the device (measured: the host's peak holds it, not only the optimizer's).
    m.offload_host_bytes += bytes.total();
    // AdamW's fp32 master copy, momentum and variance, and with micro-batches the gradient sum:
    // they move together (memory/dynamic_memory.cpp's optimizer kinds).
    m.state_lists.push_back(
        {.chunks = memory::list_share(layout, o).optimizer,
         .bytes = layout.chunk_elements * std::int64_t(sizeof(float)) * (o.accumulate ? 4 : 3),
         .param_bytes = layout.chunk_elements * std::int64_t(dtype_size(o.compute_dtype)),
         .disk_bytes = memory::disk_chunk_bytes(layout)});
  }
  return bytes;
}

// The chunk keeper's lists on every rank (RankLists), each kind with the chunk size every rank
// agrees on.
void plan_chunks(const Job& job, std::vector<PlannedRank>& world, std::size_t device_capacity) {
  const std::vector<std::shared_ptr<const RankLists>> lists = rank_lists(world);
  const parallel::ParallelContext& first = *world.front().pc;
  const parallel::GroupKind chunk_kind = distributed::chunk_group_kind(first);
  const auto agreed = [&](memory::ChunkParameters RankLists::*list, const memory::ChunkOptions& o,
                          parallel::GroupKind kind) {
    std::vector<const memory::ChunkParameters*> all;
    for (const std::shared_ptr<const RankLists>& l : lists) all.push_back(&((*l).*list));
    return distributed::agreed_chunk_size(all, o, int(first.layout().group(kind, first.rank()).size()),
                                          device_capacity);
  };
  memory::ChunkOptions options = job.chunk_options_for(job.local_batch() / job.micro_batch() > 1);
  memory::ChunkOptions host_options = options, expert_options = options;
  host_options.offload.reset();
  if (job.embedding_on_host) host_options.chunk_elements = agreed(&RankLists::host, host_options, chunk_kind);
  if (job.mesh().expert > 1)
    expert_options.chunk_elements = agreed(&RankLists::experts, expert_options, parallel::GroupKind::expert_data);
  options.chunk_elements = agreed(&RankLists::device, options, chunk_kind);
  for (std::size_t k = 0; k < world.size(); ++k) {
    PlannedRank& r = world[k];
    ModelDataBytes& m = r.model_data;
    std::map<nn::Parameter*, int> users;
    for (nn::Module* layer : r.engine->layers()) layer->count_parameter_users(users);
    const bool tied_here = std::any_of(users.begin(), users.end(), [](const auto& u) { return u.second > 1; });
    plan_list(job, r, lists[k]->device, options, chunk_kind, tied_here);
    const memory::ChunkLayout& layout = r.chunk_lists.front().layout;
    m.chunks = true;
    m.chunk_elements = layout.chunk_elements;
    m.param_chunk_bytes = layout.chunk_elements * std::int64_t(dtype_size(options.compute_dtype));
    m.chunks_in_lists = layout.chunks;
    if (options.offload) {
      m.offload = true;
      m.static_partition = options.offload->partition == memory::Partition::fixed;
    }
    if (job.mesh().expert > 1 && !lists[k]->experts.params.empty())
      plan_list(job, r, lists[k]->experts, expert_options, parallel::GroupKind::expert_data, false);
    if (job.embedding_on_host && !lists[k]->host.params.empty()) {
      host_options.group = &r.pc->group(chunk_kind);
      m.embedding_on_host_bytes =
          memory::chunk_list_bytes(layout_of(lists[k]->host, host_options), host_options).total();
    }
  }
}

}  // namespace

std::vector<PlannedRank> plan_world(const Job& job, int world_size, int ranks_per_node,
                                    std::size_t device_capacity) {
  std::vector<PlannedRank> world;
  // Ranks that differ only in their data index share a model; a sequence place builds its own (its
  // attention sees the ring's blocks from its own positions).
  std::map<std::tuple<int, int, int>, std::size_t> first_of_kind;  // (stage, tensor, sequence index) -> rank
  for (int rank = 0; rank < world_size; ++rank) {
    const parallel::Layout layout(parallel::mesh_spec(job.context, world_size, ranks_per_node));
    const parallel::Coordinates c = layout.coordinates(rank);
    const auto [it, fresh] = first_of_kind.try_emplace({c.pipeline, c.tensor, c.sequence}, world.size());
    if (fresh) {
      world.push_back(build_rank(job, world_size, rank, ranks_per_node));
      continue;
    }
    const PlannedRank& like = world[it->second];
    PlannedRank r;
    r.pc = std::make_unique<parallel::ParallelContext>(
        parallel::ParallelContext::planned(job.context, world_size, rank, ranks_per_node));
    r.model_pc = like.model_pc;
    r.layers = like.layers;
    r.model = like.model;
    r.engine = like.engine;
    r.model_data.parameters = like.model_data.parameters;
    r.model_data.frozen_bytes = like.model_data.frozen_bytes;
    r.model_data.frozen_on = like.model_data.frozen_on;
    world.push_back(std::move(r));
  }
  if (job.chunks) {
    plan_chunks(job, world, device_capacity);
  } else {
    // fp32 tensors: each parameter and its gradient, AdamW's momentum and variance.
    for (PlannedRank& r : world) {
      r.model_data.param_bytes = 8 * r.model_data.parameters;
      r.model_data.optimizer_bytes = 8 * r.model_data.parameters;
    }
  }
  return world;
}

}  // namespace tidal::sim
