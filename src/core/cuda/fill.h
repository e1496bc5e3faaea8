// The one kernel the core needs for itself: Tensor::fill_ on a GPU tensor.
#pragma once

#include <cstdint>

namespace tidal::cuda {

// dst[0, n) = value, on the compute stream.
void fill_f32(float* dst, std::int64_t n, float value);

}  // namespace tidal::cuda
