// The row softmax kernel shared by the softmax op and attention (one piece of code for both).
#pragma once

#include "ops/cpu/vec_math.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace tidal::ops::cpu {

// Whether entry j of a row is kept: j < limit (a causal row's last key + 1) and, with a key mask,
// mask[j] != 0. Branch-free, so the loops below vectorise.
inline bool kept(std::int64_t j, std::int64_t limit, const std::int32_t* mask) {
  return (j < limit) & (mask == nullptr || mask[j] != 0);
}

// y[0, n) = softmax(x[0, n)) over the kept entries (kept(j, limit, mask); mask may be null); the
// others get 0. A row with no kept entry is all zeros. Returns the row's log-sum-exp over the
// kept entries (+inf for none, so exp(x - lse) is 0 everywhere). y may be x.
inline float softmax_row(float* y, const float* x, std::int64_t n, std::int64_t limit, const std::int32_t* mask) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  limit = std::min(limit, n);
  // Without a key mask the kept entries are the prefix [0, limit): the loops skip the rest.
  const std::int64_t span = mask ? n : limit;
  float mx = kNegInf;
#pragma omp simd reduction(max : mx)
  for (std::int64_t j = 0; j < span; ++j) mx = std::max(mx, kept(j, limit, mask) ? x[j] : kNegInf);
  if (mx == kNegInf) {
    std::fill_n(y, n, 0.0f);
    return std::numeric_limits<float>::infinity();
  }
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (std::int64_t j = 0; j < span; ++j) {
    const float e = kept(j, limit, mask) ? exp_fast(x[j] - mx) : 0.0f;
    y[j] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (std::int64_t j = 0; j < span; ++j) y[j] *= inv;
  std::fill(y + span, y + n, 0.0f);
  return mx + std::log(sum);
}

// dx = y * (dy - sum(dy * y)) for one row.
inline void softmax_row_backward(float* dx, const float* dy, const float* y, std::int64_t n) {
  float dot = 0.0f;
  for (std::int64_t j = 0; j < n; ++j) dot += dy[j] * y[j];
  for (std::int64_t j = 0; j < n; ++j) dx[j] = y[j] * (dy[j] - dot);
}

}  // namespace tidal::ops::cpu
