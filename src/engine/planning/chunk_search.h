// `tidal chunk-search`: PatrickStar's offline chunk-size search (patrickstar-v2 sec. 8.1,
// Table 3). Builds the configured model's parameter shapes without allocating them, lays them
// out in chunks of each size in a range, and reports each size's fragmentation and utilisation
// and the best one.
#pragma once

#include "config/config.h"
#include "memory/chunk_layout.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tidal::comm {
class MpiRuntime;  // comm/mpi_runtime.h (in a build with MPI)
}

namespace tidal::engine {

// The configured model's parameter sizes in initialisation order (the chunks' order; a frozen base
// under LoRA is in no list): the model is built, never materialized. Under memory.embedding_on_host, the parameters of the device's
// chunks, or with `on_host` those of the embedding layer (in chunk lists of their own).
std::vector<std::int64_t> parameter_numels(const config::Config& cfg, bool on_host = false);
// The configured model's parameters, all of them (a frozen base under LoRA included).
std::int64_t model_parameters(const config::Config& cfg);

struct ChunkSizeRow {
  std::int64_t size = 0;  // elements
  int chunks = 0;         // of the param list, padding chunks of the last group included
  double fragmentation = 0;  // chunk space holding no parameter, as a fraction of all of it
  std::int64_t chunk_bytes = 0;  // every chunk list of one rank
  // The share of chunk space that parameters fill: Table 3's UTIL. (1 - fragmentation).
  double utilisation() const { return 1.0 - fragmentation; }
};

struct ChunkSearch {
  std::string model;  // "gpt, 24 layers x 1024"
  std::int64_t parameters = 0, largest = 0;  // elements: all, and the largest parameter
  int group_size = 1;                        // ranks sharing the chunks (parallel.data)
  std::int64_t bytes_per_element = 0;        // summed over the chunk lists
  memory::ChunkSizeRange range;
  bool default_range = true;
  std::vector<ChunkSizeRow> rows;   // the sizes in range that hold the largest parameter
  std::int64_t best = 0;            // least fragmentation, the smaller size on a tie
  std::int64_t training_size = 0;   // what `tidal train` picks for this config
  nlohmann::json json() const;
};

// `range`: sizes to try; a field left 0 takes the search range training uses (the largest
// parameter up to 4x it in steps of 1/32 of it, capped under memory.offload so that two chunks fit
// in the warm-up's share). A tidal::Error when no size in range holds the largest parameter.
// Under mpirun (`mpi` of more than one rank, every rank calling it): the launched layout's lists
// on every rank (its tensor blocks and pipeline stage's, in segments; the chunk group its data x
// sequence ranks), fragmentation summed over the ranks - the sizes `tidal train` agrees on.
ChunkSearch chunk_search(const config::Config& cfg, const memory::ChunkSizeRange& range = {0, 0, 0},
                         comm::MpiRuntime* mpi = nullptr);

// The report as text: the configuration, one row per size, the best.
std::string format_chunk_search(const ChunkSearch& s);

}  // namespace tidal::engine
