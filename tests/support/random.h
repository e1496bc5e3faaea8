// Test inputs from the library's own Philox init, so every test is reproducible.
#pragma once

#include "core/init.h"
#include "ops/cast.h"
#include "core/tensor.h"

#include <cstdint>

namespace tidal::testing {

inline Tensor randn(const Shape& shape, std::uint64_t key, float std = 1.0f) {
  Tensor t = Tensor::empty(shape);
  init_normal(t, {0x7e57, key}, 0.0f, std, shape);
  return t;
}

inline Tensor rand_uniform(const Shape& shape, std::uint64_t key, float lo, float hi) {
  Tensor t = Tensor::empty(shape);
  init_uniform(t, {0x7e57, key}, lo, hi, shape);
  return t;
}

// A standard normal draw times `std`, stored as `dtype` (rounded to nearest even).
inline Tensor randn_as(const Shape& shape, std::uint64_t key, DType dtype, float std = 1.0f) {
  Tensor f = randn(shape, key, std);
  if (dtype == DType::f32) return f;
  Tensor t = Tensor::empty(shape, dtype);
  ops::cast(t, f);
  return t;
}

// Integers uniform in [lo, hi).
inline Tensor randint(const Shape& shape, std::uint64_t key, std::int32_t lo, std::int32_t hi) {
  Tensor u = rand_uniform(shape, key, 0.0f, 1.0f);
  Tensor t = Tensor::empty(shape, DType::i32);
  for (std::int64_t i = 0; i < t.numel(); ++i)
    t.data<std::int32_t>()[i] = lo + std::min(hi - lo - 1, std::int32_t(u.data<float>()[i] * float(hi - lo)));
  return t;
}

}  // namespace tidal::testing
