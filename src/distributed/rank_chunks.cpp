#include "distributed/rank_chunks.h"

#include <algorithm>
#include <map>
#include <string>

namespace tidal::distributed {

// The ranks that hold the same parameters and share their chunks: the data replicas, and with
// sequence parallelism the ring's positions too (each holds every parameter and sees its share
// of the positions; DeepSpeed-Ulysses shards ZeRO over the same data x sequence group).
parallel::GroupKind chunk_group_kind(const parallel::ParallelContext& pc) {
  return pc.layout().spec().sequence > 1 ? parallel::GroupKind::data_sequence : parallel::GroupKind::data;
}

comm::Communicator& chunk_group(parallel::ParallelContext& pc) { return pc.group(chunk_group_kind(pc)); }

// `params` for a chunk manager, in segments (memory/chunk_manager.h): by the model chunk whose
// layers use them, then by the groups beyond the chunk group that hold them too - a tensor
// grid's replicas (nn::Parameter::replicas) and, for a tied embedding, the pipeline's end stages.
// Segments go in (phase, group names) order, so ranks of a replica group lay each out alike.
memory::ChunkParameters chunk_parameters(const std::vector<nn::Parameter*>& params,
                                         const pipeline::PipelineEngine& engine, parallel::ParallelContext& pc) {
  using Key = std::pair<int, std::vector<std::string>>;
  std::map<Key, std::vector<comm::Communicator*>> segments;
  std::vector<Key> keys;
  for (nn::Parameter* p : params) {
    std::vector<comm::Communicator*> replicas;
    for (comm::Communicator* g : p->replicas)
      if (g->size() > 1) replicas.push_back(g);
    if (comm::Communicator& ends = pc.group(parallel::GroupKind::pipeline_ends); engine.tied(*p) && ends.size() > 1)
      replicas.push_back(&ends);
    Key key{engine.chunk_of(*p), {}};
    for (const comm::Communicator* g : replicas) key.second.push_back(g->name());
    segments.emplace(key, replicas);
    keys.push_back(std::move(key));
  }
  // A parameter both of ZB-V's chunks use (rank 0's tied table) lies in the first's segment,
  // whose backward comes last; the chunk manager counts its users by chunk.
  memory::ChunkParameters out{.params = params, .segment = {}, .segments = {}, .users = engine.layers(),
                              .user_phases = engine.layer_chunks()};
  std::map<Key, int> index;
  for (const auto& [key, replicas] : segments) {
    index[key] = int(out.segments.size());
    out.segments.push_back({.replicas = replicas, .phase = key.first});
  }
  for (const Key& key : keys) out.segment.push_back(index.at(key));
  return out;
}

std::int64_t largest_parameter(const memory::ChunkParameters& params) {
  std::int64_t largest = 0;
  for (const nn::Parameter* p : params.params) largest = std::max(largest, p->shape.numel());
  return largest;
}

std::vector<double> padding(const memory::ChunkParameters& params, int group_size,
                            const std::vector<std::int64_t>& sizes) {
  std::vector<std::int64_t> numels;
  for (const nn::Parameter* p : params.params) numels.push_back(p->shape.numel());
  std::vector<double> waste;
  for (std::int64_t size : sizes) {
    const memory::ChunkLayout layout = memory::layout_chunks(numels, size, group_size, params.segment);
    waste.push_back(double(layout.chunks) * double(size) - double(layout.used_elements));
  }
  return waste;
}

std::vector<double> world_padding(const memory::ChunkParameters& params, int group_size,
                                  const std::vector<std::int64_t>& sizes, parallel::ParallelContext& pc) {
  // Summed in fp32, as the planned sum below is (one rule: the same size where sums round).
  const std::vector<double> mine = padding(params, group_size, sizes);
  Tensor waste = Tensor::zeros({std::int64_t(sizes.size())}, DType::f32, host_allocator());
  for (std::size_t k = 0; k < sizes.size(); ++k) waste.data<float>()[k] = float(mine[k]);
  comm::Communicator& world = pc.group(parallel::GroupKind::world);
  if (world.size() > 1) world.all_reduce(waste)->wait();
  return std::vector<double>(waste.data<float>(), waste.data<float>() + sizes.size());
}

std::int64_t world_largest_parameter(const memory::ChunkParameters& params, parallel::ParallelContext& pc) {
  Tensor largest = Tensor::zeros({1}, DType::i32, host_allocator());
  largest.data<std::int32_t>()[0] = std::int32_t(largest_parameter(params));
  comm::Communicator& world = pc.group(parallel::GroupKind::world);
  if (world.size() > 1) world.all_reduce(largest, {.op = comm::ReduceOp::max})->wait();
  return largest.data<std::int32_t>()[0];
}

namespace {

// The search over the world's lists: `largest` the largest parameter of any rank, `waste(sizes)`
// the padding summed over the ranks at each size.
template <class WorldPadding>
std::int64_t least_padding_size(std::int64_t largest, WorldPadding waste_at, const memory::ChunkOptions& options,
                                std::size_t device_capacity) {
  if (largest == 0) return 1;  // no rank holds such parameters
  const memory::ChunkSizeRange range = memory::chunk_size_range_for({largest}, options, device_capacity);
  std::vector<std::int64_t> sizes;
  for (std::int64_t size = range.from; size <= range.to; size += range.step) sizes.push_back(size);
  const std::vector<double> waste = waste_at(sizes);
  return sizes[std::size_t(std::min_element(waste.begin(), waste.end()) - waste.begin())];
}

std::int64_t single_rank_size(const memory::ChunkParameters& params, const memory::ChunkOptions& options,
                              int group_size, std::size_t device_capacity) {
  std::vector<std::int64_t> numels;
  for (const nn::Parameter* p : params.params) numels.push_back(p->shape.numel());
  return memory::chunk_size_for(numels, group_size, options, device_capacity, params.segment);
}

}  // namespace

std::int64_t agreed_chunk_size(const memory::ChunkParameters& params, const memory::ChunkOptions& options,
                               std::size_t device_capacity, parallel::ParallelContext& pc) {
  if (options.chunk_elements) return options.chunk_elements;
  const int group = options.group ? options.group->size() : 1;
  if (pc.world_size() == 1) return single_rank_size(params, options, group, device_capacity);
  return least_padding_size(
      world_largest_parameter(params, pc),
      [&](const std::vector<std::int64_t>& sizes) { return world_padding(params, group, sizes, pc); }, options,
      device_capacity);
}

std::int64_t agreed_chunk_size(const std::vector<const memory::ChunkParameters*>& ranks,
                               const memory::ChunkOptions& options, int group_size, std::size_t device_capacity) {
  if (options.chunk_elements) return options.chunk_elements;
  if (ranks.size() == 1) return single_rank_size(*ranks.front(), options, group_size, device_capacity);
  std::int64_t largest = 0;
  for (const memory::ChunkParameters* r : ranks) largest = std::max(largest, largest_parameter(*r));
  return least_padding_size(
      largest,
      [&](const std::vector<std::int64_t>& sizes) {
        std::vector<float> sum(sizes.size(), 0.0f);  // in fp32 as world_padding's all-reduce
        std::map<const memory::ChunkParameters*, std::vector<double>> of;  // ranks often share lists
        for (const memory::ChunkParameters* r : ranks) {
          auto [it, fresh] = of.try_emplace(r);
          if (fresh) it->second = padding(*r, group_size, sizes);
          for (std::size_t k = 0; k < sizes.size(); ++k) sum[k] += float(it->second[k]);
        }
        return std::vector<double>(sum.begin(), sum.end());
      },
      options, device_capacity);
}

}  // namespace tidal::distributed
