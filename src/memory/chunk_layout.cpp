#include "memory/chunk_layout.h"

#include "core/error.h"

#include <algorithm>

namespace tidal::memory {

const char* chunk_kind_name(ChunkKind k) {
  switch (k) {
    case ChunkKind::param: return "param";
    case ChunkKind::master: return "param fp32";
    case ChunkKind::momentum: return "momentum";
    case ChunkKind::variance: return "variance";
    case ChunkKind::grad: return "grad fp32";
  }
  return "?";
}

double ChunkLayout::fragmentation() const {
  const double space = double(chunks) * double(chunk_elements);
  return space > 0 ? 1.0 - double(used_elements) / space : 0.0;
}

ChunkLayout layout_chunks(const std::vector<std::int64_t>& numels, std::int64_t chunk_elements, int group_size,
                          const std::vector<int>& segment) {
  TIDAL_CHECK(chunk_elements > 0 && group_size >= 1, "chunk size {} and group size {} must be positive",
              chunk_elements, group_size);
  TIDAL_ASSERT(segment.empty() || segment.size() == numels.size(), "{} segment ids for {} parameters", segment.size(),
               numels.size());
  const int segments = segment.empty() ? 1 : *std::max_element(segment.begin(), segment.end()) + 1;
  ChunkLayout layout;
  layout.chunk_elements = chunk_elements;
  layout.group_size = group_size;
  layout.places.resize(numels.size());
  layout.segment_chunks = {0};
  int start = 0;  // the segment's first chunk
  for (int s = 0; s < segments; ++s) {
    int chunk = start;
    std::int64_t filled = 0;
    bool any = false;
    for (std::size_t i = 0; i < numels.size(); ++i) {
      if (!segment.empty() && segment[i] != s) continue;
      const std::int64_t n = numels[i];
      TIDAL_CHECK(n <= chunk_elements,
                  "a parameter of {} elements does not fit in chunks of {}: set memory.chunk_size >= {} (or 0 to "
                  "search)",
                  n, chunk_elements, n);
      if (filled + n > chunk_elements) ++chunk, filled = 0;
      layout.places[i] = {chunk, filled};
      filled += n;
      layout.used_elements += n;
      any = true;
    }
    const int used = any ? chunk + 1 - start : 0;
    start += (used + group_size - 1) / group_size * group_size;
    layout.segment_chunks.push_back(start);
  }
  layout.chunks = start;
  return layout;
}

ChunkSizeRange default_chunk_size_range(const std::vector<std::int64_t>& numels, std::int64_t at_most) {
  const std::int64_t largest = numels.empty() ? 1 : *std::max_element(numels.begin(), numels.end());
  return {.from = largest,
          .to = std::min(4 * largest, std::max(largest, at_most)),
          .step = std::max<std::int64_t>(1, largest / 32)};
}

std::int64_t search_chunk_size(const std::vector<std::int64_t>& numels, int group_size, const ChunkSizeRange& range,
                               const std::vector<int>& segment) {
  TIDAL_CHECK(range.from > 0 && range.step > 0 && range.to >= range.from,
              "chunk sizes from {} to {} in steps of {}: need 0 < from <= to and step > 0", range.from, range.to,
              range.step);
  const std::int64_t largest = numels.empty() ? 1 : *std::max_element(numels.begin(), numels.end());
  std::int64_t best = 0;
  double best_waste = 2.0;
  for (std::int64_t size = range.from; size <= range.to; size += range.step) {
    if (size < largest) continue;
    const double waste = layout_chunks(numels, size, group_size, segment).fragmentation();
    if (waste < best_waste - 1e-12) best = size, best_waste = waste;
  }
  return best;
}

}  // namespace tidal::memory
