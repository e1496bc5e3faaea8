// How one rank's parameters lie in chunks under a parallel layout (memory/chunk_manager.h): the
// ranks that share its lists (the chunk group), its parameters in segments by model chunk and by
// the groups beyond the chunk group that hold them too, and the one chunk size every rank uses.
// The model data keeper and `tidal chunk-search` share them.
#pragma once

#include "memory/chunk_manager.h"
#include "parallel/context.h"
#include "pipeline/engine.h"

#include <cstdint>
#include <vector>

namespace tidal::distributed {

// The ranks that hold the same parameters and share their chunks: the data replicas, and with
// sequence parallelism the ring's positions too.
parallel::GroupKind chunk_group_kind(const parallel::ParallelContext& pc);
comm::Communicator& chunk_group(parallel::ParallelContext& pc);

// `params` (this rank's, in the model's order) for a chunk manager, in segments.
memory::ChunkParameters chunk_parameters(const std::vector<nn::Parameter*>& params,
                                         const pipeline::PipelineEngine& engine, parallel::ParallelContext& pc);

// One rank's part of the world's figures (pure): the largest parameter it holds, and the padding
// (elements) of its lists laid out at each size.
std::int64_t largest_parameter(const memory::ChunkParameters& params);
std::vector<double> padding(const memory::ChunkParameters& params, int group_size,
                            const std::vector<std::int64_t>& sizes);

// The same summed over the world: collectives (every rank calls them alike).
std::int64_t world_largest_parameter(const memory::ChunkParameters& params, parallel::ParallelContext& pc);
std::vector<double> world_padding(const memory::ChunkParameters& params, int group_size,
                                  const std::vector<std::int64_t>& sizes, parallel::ParallelContext& pc);

// The chunk size of a run: ranks holding the same segment must lay it out alike, whatever else
// they hold, so every rank takes one size - options.chunk_elements, or PatrickStar's search
// (patrickstar-v2 sec. 8.1) run over every rank's lists at once: the size in the range of the
// world's largest parameter with the least padding summed over the ranks. A collective.
std::int64_t agreed_chunk_size(const memory::ChunkParameters& params, const memory::ChunkOptions& options,
                               std::size_t device_capacity, parallel::ParallelContext& pc);
// The same size from every rank's parameters at once (`ranks[r]`: rank r's), as the cost model
// plans a world (sim/): no communication. `group_size`: the chunk group's ranks.
std::int64_t agreed_chunk_size(const std::vector<const memory::ChunkParameters*>& ranks,
                               const memory::ChunkOptions& options, int group_size, std::size_t device_capacity);

}  // namespace tidal::distributed
