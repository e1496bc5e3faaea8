// The row softmax kernel shared by the softmax op and attention (one piece of code for both).
#pragma once

#include "ops/cpu/vec_math.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace tidal::ops::cpu {

// Whether entry j of a row is kept: first <= j < limit (the row's keys: its document's first
// and, causal, its own + 1) and, with a key mask, mask[j] != 0. Branch-free, so the loops below
// vectorise.
inline bool kept(std::int64_t j, std::int64_t first, std::int64_t limit, const std::int32_t* mask) {
  return (j >= first) & (j < limit) & (mask == nullptr || mask[j] != 0);
}

// How far a row's loops run to cover its kept entries: without a key mask they are the prefix
// [0, limit), and the loops stop at the first whole number of 16-lane vectors past it (the
// entries between are computed and dropped), so no scalar remainder runs (a causal row's limit is
// any number; measured, the remainders were half the CPU attention forward's own time); with a
// mask, the whole row.
inline std::int64_t kept_span(std::int64_t n, std::int64_t limit, const std::int32_t* mask) {
  return mask ? n : std::min(n, (limit + 15) / 16 * 16);
}

namespace detail {

// softmax_row over [0, span), `keep(j)` saying which entries count.
template <class Keep>
inline float softmax_span(float* y, const float* x, std::int64_t n, std::int64_t span, Keep keep) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  // The maximum in 16 lanes, a vector's worth at a time: a max reduction over j < span the
  // compiler splits at the keep bound into scalar loops (half the attention forward's own time,
  // measured); over a fixed 16 it does not.
  float lanes[16];
  std::fill_n(lanes, 16, kNegInf);
  for (std::int64_t j0 = 0; j0 < span; j0 += 16) {
    const std::int64_t width = std::min<std::int64_t>(16, span - j0);
#pragma omp simd
    for (std::int64_t l = 0; l < 16; ++l)
      lanes[l] = std::max(lanes[l], l < width && keep(j0 + l) ? x[j0 + l] : kNegInf);
  }
  float mx = kNegInf;
  for (float lane : lanes) mx = std::max(mx, lane);
  if (mx == kNegInf) {
    std::fill_n(y, n, 0.0f);
    return std::numeric_limits<float>::infinity();
  }
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (std::int64_t j = 0; j < span; ++j) {
    const float e = keep(j) ? exp_fast(x[j] - mx) : 0.0f;
    y[j] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (std::int64_t j = 0; j < span; ++j) y[j] *= inv;
  std::fill(y + span, y + n, 0.0f);
  return mx + std::log(sum);
}

}  // namespace detail

// y[0, n) = softmax(x[0, n)) over the kept entries (kept(j, first, limit, mask); mask may be
// null); the others get 0. A row with no kept entry is all zeros. Returns the row's log-sum-exp
// over the kept entries (+inf for none, so exp(x - lse) is 0 everywhere). y may be x; x[0, n) is
// read whole (entries outside the kept ones only where they are dropped).
inline float softmax_row(float* y, const float* x, std::int64_t n, std::int64_t first, std::int64_t limit,
                         const std::int32_t* mask) {
  limit = std::min(limit, n);
  const std::int64_t span = kept_span(n, limit, mask);
  // Separate loops, so the common ones have no load or bound under a condition to stop them
  // vectorising.
  if (mask)
    return detail::softmax_span(y, x, n, span, [&](std::int64_t j) { return kept(j, first, limit, mask); });
  if (first > 0)
    return detail::softmax_span(y, x, n, span, [&](std::int64_t j) { return (j >= first) & (j < limit); });
  return detail::softmax_span(y, x, n, span, [&](std::int64_t j) { return j < limit; });
}

// dx = y * (dy - sum(dy * y)) for one row.
inline void softmax_row_backward(float* dx, const float* dy, const float* y, std::int64_t n) {
  float dot = 0.0f;
  for (std::int64_t j = 0; j < n; ++j) dot += dy[j] * y[j];
  for (std::int64_t j = 0; j < n; ++j) dx[j] = y[j] * (dy[j] - dot);
}

}  // namespace tidal::ops::cpu
