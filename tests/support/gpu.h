// GPU test helpers: a skip, with the reason, where this process has no GPU (the `gpu` label's
// contract: skipped, not failed), and tensors moved to and from GPU memory.
#pragma once

#include "core/gpu.h"
#include "core/tensor.h"

#include <gtest/gtest.h>

#define TIDAL_REQUIRE_GPU()                                                                          \
  do {                                                                                               \
    if (!::tidal::gpu_available()) GTEST_SKIP() << "skipped: " << ::tidal::gpu_description();       \
  } while (0)

namespace tidal::testing {

inline Tensor to_gpu(const Tensor& t) { return t.clone(gpu_allocator()); }
inline Tensor to_host(const Tensor& t) { return t.clone(host_allocator()); }
inline Tensor gpu_empty(const Shape& shape, DType dtype = DType::f32) {
  return Tensor::empty(shape, dtype, gpu_allocator());
}

}  // namespace tidal::testing
