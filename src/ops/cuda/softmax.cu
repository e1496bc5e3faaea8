// Softmax over the last dimension on the GPU (ops/softmax.h), fp32 like the CPU backend: a block
// per row, the row maximum subtracted before exp, a row whose entries are all -inf (or NaN) gives
// zeros as the CPU's softmax_row does. Reductions are block reductions in a fixed tree order, so
// results are bitwise reproducible.
#include "ops/softmax.h"

#include "ops/cuda/common.cuh"

namespace tidal::ops::cuda {
namespace {

constexpr int kThreads = 256;

// ---- kernels ----

// x, y: [N, C]; y may alias x (each element is read before its own thread writes it).
__global__ void softmax_forward_kernel(float* y, const float* x, std::int64_t N, std::int64_t C) {
  __shared__ float scratch[32];
  for (std::int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const float* xr = x + n * C;
    float* yr = y + n * C;
    float mx = -INFINITY;
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) mx = fmaxf(mx, xr[c]);  // fmaxf skips NaN
    mx = block_max(mx, scratch);
    if (mx == -INFINITY) {  // the same value in every thread: the branch is uniform
      for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) yr[c] = 0.0f;
      continue;
    }
    float sum = 0.0f;
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) sum += expf(xr[c] - mx);
    const float inv = 1.0f / block_sum(sum, scratch);
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) yr[c] = expf(xr[c] - mx) * inv;
  }
}

// dx = y * (dy - sum(dy * y)) per row; dx may alias dy or y.
__global__ void softmax_backward_kernel(float* dx, const float* dy, const float* y, std::int64_t N, std::int64_t C) {
  __shared__ float scratch[32];
  for (std::int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const float* dyr = dy + n * C;
    const float* yr = y + n * C;
    float dot = 0.0f;
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) dot += dyr[c] * yr[c];
    dot = block_sum(dot, scratch);
    float* dxr = dx + n * C;
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) dxr[c] = yr[c] * (dyr[c] - dot);
  }
}

}  // namespace

// ---- launchers ----

void softmax_forward(Tensor& y, const Tensor& x) {
  expect_cuda_contiguous({&x, &y}, "softmax operand");
  expect_same(y, x, "softmax y/x");
  TIDAL_ASSERT(x.dtype() == DType::f32, "softmax on {}", x.str());
  if (x.numel() == 0) return;
  const std::int64_t C = x.dim(-1), N = rows_of(x);
  softmax_forward_kernel<<<blocks_for(N, 1), kThreads, 0, compute_stream()>>>(ptr<float>(y), ptr<float>(x), N, C);
  TIDAL_CUDA_CHECK_LAUNCH("softmax_forward_kernel");
}

void softmax_backward(Tensor& dx, const Tensor& dy, const Tensor& y) {
  expect_cuda_contiguous({&y, &dy, &dx}, "softmax backward operand");
  expect_same(dy, y, "softmax dy/y");
  expect_same(dx, y, "softmax dx/y");
  TIDAL_ASSERT(y.dtype() == DType::f32, "softmax on {}", y.str());
  if (y.numel() == 0) return;
  const std::int64_t C = y.dim(-1), N = rows_of(y);
  softmax_backward_kernel<<<blocks_for(N, 1), kThreads, 0, compute_stream()>>>(ptr<float>(dx), ptr<float>(dy),
                                                                                 ptr<float>(y), N, C);
  TIDAL_CUDA_CHECK_LAUNCH("softmax_backward_kernel");
}

}  // namespace tidal::ops::cuda
