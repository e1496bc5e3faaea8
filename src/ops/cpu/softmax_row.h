// The row softmax kernel shared by the softmax op and attention (one piece of code for both).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace tidal::ops::cpu {

// y[0, n) = softmax(x[0, n)) over the entries with keep(j); the others get 0. A row with no
// kept entry is all zeros. Returns the row's log-sum-exp over the kept entries (+inf for none,
// so exp(x - lse) is 0 everywhere).
template <class Keep>
inline float softmax_row(float* y, const float* x, std::int64_t n, Keep&& keep) {
  float mx = -std::numeric_limits<float>::infinity();
  for (std::int64_t j = 0; j < n; ++j)
    if (keep(j) && x[j] > mx) mx = x[j];
  if (mx == -std::numeric_limits<float>::infinity()) {
    for (std::int64_t j = 0; j < n; ++j) y[j] = 0.0f;
    return std::numeric_limits<float>::infinity();
  }
  float sum = 0.0f;
  for (std::int64_t j = 0; j < n; ++j) {
    const float e = keep(j) ? std::exp(x[j] - mx) : 0.0f;
    y[j] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
  for (std::int64_t j = 0; j < n; ++j) y[j] *= inv;
  return mx + std::log(sum);
}

// dx = y * (dy - sum(dy * y)) for one row.
inline void softmax_row_backward(float* dx, const float* dy, const float* y, std::int64_t n) {
  float dot = 0.0f;
  for (std::int64_t j = 0; j < n; ++j) dot += dy[j] * y[j];
  for (std::int64_t j = 0; j < n; ++j) dx[j] = y[j] * (dy[j] - dot);
}

}  // namespace tidal::ops::cpu
