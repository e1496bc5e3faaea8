// A thread's even share of a range inside an OpenMP parallel region: the host's passes over
// memory (copies, zeroing, the optimizer's update) split this way, each thread once.
#pragma once

#include <omp.h>

#include <cstdint>

namespace tidal {

struct ThreadShare {
  std::int64_t lo, hi;  // [lo, hi)
};

// This thread's share of [0, total): bounds on multiples of `align` (a cache line's elements),
// the last thread's up to total.
inline ThreadShare thread_share(std::int64_t total, std::int64_t align) {
  const std::int64_t n = omp_get_num_threads(), i = omp_get_thread_num();
  return {total * i / n / align * align, i + 1 == n ? total : total * (i + 1) / n / align * align};
}

}  // namespace tidal
