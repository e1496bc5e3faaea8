#include "core/cuda/fill.h"

#include "core/cuda/runtime.h"

namespace tidal::cuda {
namespace {

// ---- kernels ----

__global__ void fill_kernel(float* dst, std::int64_t n, float value) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    dst[i] = value;
}

}  // namespace

// ---- launchers ----

void fill_f32(float* dst, std::int64_t n, float value) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  fill_kernel<<<blocks_for(n, kThreads), kThreads, 0, compute_stream()>>>(dst, n, value);
  TIDAL_CUDA_CHECK_LAUNCH("fill_kernel");
}

}  // namespace tidal::cuda
