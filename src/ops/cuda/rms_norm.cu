// RMSNorm on the GPU (ops/rms_norm.h), the CPU backend's formula (LlamaRMSNorm's): a block per
// row for the mean of squares, y and dx. dw is a column sum over the rows, taken as LayerNorm's
// dw is (ops/cuda/layernorm.cu): each chunk of rows sums into its own partial row, then one thread
// per column adds the partials in chunk order, so dw is bitwise reproducible from run to run.
#include "ops/rms_norm.h"

#include "core/gpu.h"
#include "ops/cuda/common.cuh"

#include <algorithm>

namespace tidal::ops::cuda {
namespace {

constexpr int kRowThreads = 256;
constexpr int kColumnThreads = 128;
// dw: its partials by common.cuh's row_chunks (the summation order fixed by the shape).

// ---- kernels ----

// x, y: [N, C]; w: [C] fp32; rstd: [N].
template <class T>
__global__ void rms_norm_forward_kernel(T* y, float* __restrict__ rstd, const T* x, const float* __restrict__ w,
                                        float eps, std::int64_t N, std::int64_t C) {
  __shared__ float scratch[32];
  for (std::int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* xr = x + n * C;
    float sum_sq = 0.0f;
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const float v = load(xr[c]);
      sum_sq += v * v;
    }
    const float rs = 1.0f / sqrtf(block_sum(sum_sq, scratch) / float(C) + eps);
    T* yr = y + n * C;
    // (x * rstd) * w: LlamaRMSNorm's order of the two products.
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) yr[c] = store<T>(load(xr[c]) * rs * w[c]);
    if (threadIdx.x == 0) rstd[n] = rs;
  }
}

// dx = rstd (w dy - xhat mean(w dy xhat)), xhat = x rstd. dx may alias dy or x (each element is
// read before its own thread writes it): no __restrict__ on them.
template <class T>
__global__ void rms_norm_backward_dx_kernel(T* dx, const T* dy, const T* x, const float* __restrict__ w,
                                            const float* __restrict__ rstd, std::int64_t N, std::int64_t C) {
  __shared__ float scratch[32];
  for (std::int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* xr = x + n * C;
    const T* dyr = dy + n * C;
    const float rs = rstd[n];
    float sum_gx = 0.0f;
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) sum_gx += load(dyr[c]) * w[c] * (load(xr[c]) * rs);
    const float mgx = block_sum(sum_gx, scratch) / float(C);
    T* dxr = dx + n * C;
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const float xhat = load(xr[c]) * rs;
      dxr[c] = store<T>((load(dyr[c]) * w[c] - xhat * mgx) * rs);
    }
  }
}

// partial [chunks, C]: chunk p (blockIdx.y) sums dy * xhat over its rows [p * rows_per_chunk, ...)
// in row order, one thread per column.
template <class T>
__global__ void rms_norm_backward_partial_kernel(float* __restrict__ partial, const T* __restrict__ dy,
                                                 const T* __restrict__ x, const float* __restrict__ rstd,
                                                 std::int64_t N, std::int64_t C, std::int64_t rows_per_chunk) {
  const std::int64_t c = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  const std::int64_t p = blockIdx.y;
  const std::int64_t begin = p * rows_per_chunk, end = min(N, begin + rows_per_chunk);
  float s = 0.0f;
  for (std::int64_t n = begin; n < end; ++n) s += load(dy[n * C + c]) * (load(x[n * C + c]) * rstd[n]);
  partial[p * C + c] = s;
}

// dw [C] += the partials summed in chunk order.
__global__ void rms_norm_backward_reduce_kernel(float* __restrict__ dw, const float* __restrict__ partial,
                                                std::int64_t chunks, std::int64_t C) {
  TIDAL_CUDA_FOR(c, C) {
    float s = dw[c];
    for (std::int64_t p = 0; p < chunks; ++p) s += partial[p * C + c];
    dw[c] = s;
  }
}

void expect_rms_shapes(const Tensor& x, const Tensor& w, const Tensor& rstd, const char* what) {
  const std::int64_t C = x.dim(-1), N = rows_of(x);
  TIDAL_ASSERT(w.numel() == C && rstd.numel() == N && w.dtype() == DType::f32 && rstd.dtype() == DType::f32,
               "{} shapes: x {} w {} rstd {} (w [C] and rstd [N] fp32)", what, x.str(), w.str(), rstd.str());
}

}  // namespace

// ---- launchers ----

void rms_norm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, float eps) {
  expect_cuda_contiguous({&y, &rstd, &x, &w}, "rms_norm_forward operand");
  expect_same(y, x, "rms_norm_forward y/x");
  if (x.numel() == 0) return;
  expect_rms_shapes(x, w, rstd, "rms_norm_forward");
  const std::int64_t C = x.dim(-1), N = rows_of(x);
  with_float_type(x.dtype(), [&]<class T>() {
    rms_norm_forward_kernel<T><<<blocks_for(N, 1), kRowThreads, 0, compute_stream()>>>(
        ptr<T>(y), ptr<float>(rstd), ptr<T>(x), ptr<float>(w), eps, N, C);
  });
  TIDAL_CUDA_CHECK_LAUNCH("rms_norm_forward_kernel");
}

void rms_norm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd) {
  expect_cuda_contiguous({&dx, &dw, &dy, &x, &w, &rstd}, "rms_norm_backward operand");
  expect_same(dx, x, "rms_norm_backward dx/x");
  expect_same(dy, x, "rms_norm_backward dy/x");
  expect_same(dw, w, "rms_norm_backward dw/w");
  if (x.numel() == 0) return;
  expect_rms_shapes(x, w, rstd, "rms_norm_backward");
  const std::int64_t C = x.dim(-1), N = rows_of(x);
  const auto [chunks, rows_per_chunk] = row_chunks(N, C);
  Tensor partial = Tensor::empty({chunks, C}, DType::f32, gpu_allocator());
  const cudaStream_t stream = compute_stream();
  // dw first: it reads dy and x, which dx may overwrite (the CPU allows dx to alias either).
  with_float_type(x.dtype(), [&]<class T>() {
    const dim3 grid{unsigned((C + kColumnThreads - 1) / kColumnThreads), unsigned(chunks)};
    rms_norm_backward_partial_kernel<T><<<grid, kColumnThreads, 0, stream>>>(ptr<float>(partial), ptr<T>(dy),
                                                                             ptr<T>(x), ptr<float>(rstd), N, C,
                                                                             rows_per_chunk);
    TIDAL_CUDA_CHECK_LAUNCH("rms_norm_backward_partial_kernel");
    rms_norm_backward_reduce_kernel<<<blocks_for(C, kColumnThreads), kColumnThreads, 0, stream>>>(
        ptr<float>(dw), ptr<float>(partial), chunks, C);
    TIDAL_CUDA_CHECK_LAUNCH("rms_norm_backward_reduce_kernel");
    rms_norm_backward_dx_kernel<T><<<blocks_for(N, 1), kRowThreads, 0, stream>>>(
        ptr<T>(dx), ptr<T>(dy), ptr<T>(x), ptr<float>(w), ptr<float>(rstd), N, C);
    TIDAL_CUDA_CHECK_LAUNCH("rms_norm_backward_dx_kernel");
  });
}

}  // namespace tidal::ops::cuda
