// The tensor-to-chunk mapping (patrickstar-v2 sec. 6.1.1): parameters in model-initialisation
// order fill chunks of equal size, each parameter whole in one chunk (a parameter that does not
// fit in what is left of a chunk starts the next). The four chunk lists of model data - param
// (the compute precision), param fp32, momentum, variance - share this layout, so a parameter has
// the same chunk and offset in each, and splitting the lists at the same chunk boundaries keeps
// the optimizer's work local to a rank (sec. 6.2). The chunk count is padded to a multiple of the
// communication group's size (nproc chunks per group, one owned by each rank).
//
// Segments: parameters may come in segments, each laid out from a communication-group boundary
// of its own (segment 0 first, then 1, ...; within one, in the given order). A segment's k-th
// chunk then has the same owner on every rank holding that segment, whatever precedes it there:
// ranks that hold the same parameters beyond the group (a tensor grid's replicated blocks, the
// tied embedding at both pipeline ends) sum their owned gradient chunks directly.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

namespace tidal::memory {

// The lists sharing a layout (grad: the fp32 sum of accumulated micro-batches' gradients).
enum class ChunkKind { param, master, momentum, variance, grad };
const char* chunk_kind_name(ChunkKind k);

struct ChunkLayout {
  struct Place {
    int chunk = 0;
    std::int64_t offset = 0;  // elements from the chunk's start
  };
  std::int64_t chunk_elements = 0;
  int chunks = 0;            // including padding chunks (empty) to a multiple of group_size
  int group_size = 1;        // chunks per communication group
  std::vector<Place> places;  // per parameter, in the given order
  std::int64_t used_elements = 0;
  // Segment s holds chunks [segment_chunks[s], segment_chunks[s + 1]) (whole communication groups).
  std::vector<int> segment_chunks = {0, 0};

  // Elements of chunk space not holding a parameter, as a fraction of all chunk space.
  double fragmentation() const;
  // The communication group of a chunk, and the rank owning it (its index in the group).
  int group_of(int chunk) const { return chunk / group_size; }
  int owner_of(int chunk) const { return chunk % group_size; }
  int segments() const { return int(segment_chunks.size()) - 1; }
};

// Parameters of `numels` in segments (segment[i] for parameter i, 0..S-1; empty: all in one).
// A tidal::Error if a parameter is larger than a chunk (the message names the size needed).
ChunkLayout layout_chunks(const std::vector<std::int64_t>& numels, std::int64_t chunk_elements, int group_size = 1,
                          const std::vector<int>& segment = {});

// Chunk sizes (elements) to try: from, from + step, ... up to `to`.
struct ChunkSizeRange {
  std::int64_t from = 0, to = 0, step = 1;
};
// PatrickStar's pre-training search range, scaled to the model: from the largest parameter up to
// 4x it (and up to `at_most`, unless the largest parameter is larger) in steps of 1/32 of it.
ChunkSizeRange default_chunk_size_range(const std::vector<std::int64_t>& numels,
                                        std::int64_t at_most = std::numeric_limits<std::int64_t>::max());
// The size in `range` with the least fragmentation (padding chunks of the last group included);
// the smaller size wins ties, sizes smaller than the largest parameter are skipped. PatrickStar's
// pre-training search tool (patrickstar-v2 sec. 8.1, Table 3). 0 when no size in range fits.
std::int64_t search_chunk_size(const std::vector<std::int64_t>& numels, int group_size, const ChunkSizeRange& range,
                               const std::vector<int>& segment = {});

}  // namespace tidal::memory
