#include "data/sample_order.h"

#include "core/philox.h"

namespace tidal::data {

std::int64_t epoch_permutation(std::int64_t i, std::int64_t n, std::uint64_t seed, std::uint64_t epoch) {
  int bits = 2;
  while ((std::int64_t(1) << bits) < n) bits += 2;
  const int half = bits / 2;
  const std::uint64_t mask = (std::uint64_t(1) << half) - 1;
  std::uint64_t x = std::uint64_t(i);
  do {
    std::uint64_t l = x >> half, r = x & mask;
    for (std::uint32_t round = 0; round < 4; ++round) {
      const PhiloxCounter f = philox4x32({std::uint32_t(r), round, std::uint32_t(epoch), std::uint32_t(epoch >> 32)},
                                         {std::uint32_t(seed), std::uint32_t(seed >> 32)});
      const std::uint64_t next_r = l ^ (f[0] & mask);
      l = r;
      r = next_r;
    }
    x = (l << half) | r;
  } while (std::int64_t(x) >= n);
  return std::int64_t(x);
}

}  // namespace tidal::data
