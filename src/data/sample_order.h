// The order in which an epoch visits a data file's samples: a seeded bijection on [0, n)
// (a 4-round Feistel network on the next power of two, walking the cycle back into [0, n)).
// O(1) memory and random access, so any rank can find any position of any epoch.
#pragma once

#include <cstdint>

namespace tidal::data {

std::int64_t epoch_permutation(std::int64_t i, std::int64_t n, std::uint64_t seed, std::uint64_t epoch);

// The sample that training position `index` reads: epoch index / n, its permuted slot.
inline std::int64_t training_sample(std::int64_t index, std::int64_t n, std::uint64_t seed) {
  return epoch_permutation(index % n, n, seed, std::uint64_t(index / n));
}

}  // namespace tidal::data
