// Who writes what in a sharded save: blocks that several ranks hold alike (data-parallel
// replicas, copies of a tensor-parallel block, a tied embedding at both pipeline ends) are written
// once, by one of their holders, and the bytes spread over the ranks: the largest blocks first,
// each to the holder with the fewest bytes so far (the lowest rank on a tie). Pure: a checkpoint
// (engine/checkpoint/checkpointer.h) and the cost model (sim/) plan the same.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tidal::io {

struct HeldBlockKey {
  std::string key;      // what names the block alike on every rank holding it
  std::int64_t bytes = 0;
};

// held[r]: rank r's blocks. Returns, for each rank, the keys it writes.
std::vector<std::vector<std::string>> assign_writers(const std::vector<std::vector<HeldBlockKey>>& held);

}  // namespace tidal::io
