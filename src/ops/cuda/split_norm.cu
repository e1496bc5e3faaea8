// A split norm's row products on the GPU (ops/split_norm.h), so 2D / 2.5D / 3D tensor parallelism
// keeps its norms on the device: a block per row for the rows' sums, y and dx; the weight
// gradients as the norms' (common.cuh's row_chunks): each chunk of rows sums into its own
// partial row, then one thread per column adds the partials in chunk order, so dw and db are
// bitwise reproducible from run to run. fp32 operands throughout.
#include "ops/split_norm.h"

#include "core/gpu.h"
#include "ops/cuda/common.cuh"

#include <algorithm>

namespace tidal::ops::cuda {
namespace {

constexpr int kRowThreads = 256;
constexpr int kColumnThreads = 128;

// ---- kernels ----

// stats [N, 2] = (sum of the row's x, 0 when not centered; sum of squares).
__global__ void split_norm_sums_kernel(float* __restrict__ stats, const float* __restrict__ x, std::int64_t N,
                                       std::int64_t C, bool centered) {
  __shared__ float scratch[32];
  for (std::int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const float* xr = x + n * C;
    float s = 0.0f, s2 = 0.0f;
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      s += xr[c];
      s2 += xr[c] * xr[c];
    }
    s = block_sum(s, scratch);
    s2 = block_sum(s2, scratch);
    if (threadIdx.x == 0) {
      stats[2 * n] = centered ? s : 0.0f;
      stats[2 * n + 1] = s2;
    }
  }
}

// stats in: the whole row's sums; out: (mean, rstd). y = (x - mean) rstd w (+ b).
__global__ void split_norm_forward_kernel(float* __restrict__ y, float* __restrict__ stats, const float* __restrict__ x,
                                          const float* __restrict__ w, const float* __restrict__ b, std::int64_t N,
                                          std::int64_t C, float full, float eps) {
  __shared__ float row[2];
  for (std::int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    if (threadIdx.x == 0) {
      const float mean = stats[2 * n] / full;
      const float var = fmaxf(0.0f, stats[2 * n + 1] / full - mean * mean);
      row[0] = mean;
      row[1] = 1.0f / sqrtf(var + eps);
      stats[2 * n] = row[0];
      stats[2 * n + 1] = row[1];
    }
    __syncthreads();
    const float mean = row[0], inv = row[1];
    const float* xr = x + n * C;
    float* yr = y + n * C;
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const float h = (xr[c] - mean) * inv;
      yr[c] = b != nullptr ? h * w[c] + b[c] : h * w[c];
    }
    __syncthreads();  // row[] is rewritten for the next row
  }
}

// partial [2, chunks, C]: chunk p (blockIdx.y) sums dy xhat (and dy) over its rows in row order,
// one thread per column.
__global__ void split_norm_weight_partial_kernel(float* __restrict__ partial, const float* __restrict__ dy,
                                                 const float* __restrict__ x, const float* __restrict__ stats,
                                                 std::int64_t N, std::int64_t C, std::int64_t chunks,
                                                 std::int64_t rows_per_chunk) {
  const std::int64_t c = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  const std::int64_t p = blockIdx.y;
  const std::int64_t begin = p * rows_per_chunk, end = min(N, begin + rows_per_chunk);
  float sw = 0.0f, sb = 0.0f;
  for (std::int64_t n = begin; n < end; ++n) {
    const float d = dy[n * C + c];
    sw += d * ((x[n * C + c] - stats[2 * n]) * stats[2 * n + 1]);
    sb += d;
  }
  partial[p * C + c] = sw;
  partial[(chunks + p) * C + c] = sb;
}

// dw [C] (and db) += the partials summed in chunk order.
__global__ void split_norm_weight_reduce_kernel(float* __restrict__ dw, float* __restrict__ db,
                                                const float* __restrict__ partial, std::int64_t chunks,
                                                std::int64_t C) {
  TIDAL_CUDA_FOR(c, C) {
    float sw = dw[c];
    for (std::int64_t p = 0; p < chunks; ++p) sw += partial[p * C + c];
    dw[c] = sw;
    if (db != nullptr) {
      float sb = db[c];
      for (std::int64_t p = 0; p < chunks; ++p) sb += partial[(chunks + p) * C + c];
      db[c] = sb;
    }
  }
}

// sums [N, 2] = (sum of g = dy w, 0 when not centered; sum of g xhat) over the row's features here.
__global__ void split_norm_grad_sums_kernel(float* __restrict__ sums, const float* __restrict__ dy,
                                            const float* __restrict__ x, const float* __restrict__ stats,
                                            const float* __restrict__ w, std::int64_t N, std::int64_t C,
                                            bool centered) {
  __shared__ float scratch[32];
  for (std::int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const float mean = stats[2 * n], inv = stats[2 * n + 1];
    float s = 0.0f, sh = 0.0f;
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const float g = dy[n * C + c] * w[c];
      s += g;
      sh += g * ((x[n * C + c] - mean) * inv);
    }
    s = block_sum(s, scratch);
    sh = block_sum(sh, scratch);
    if (threadIdx.x == 0) {
      sums[2 * n] = centered ? s : 0.0f;
      sums[2 * n + 1] = sh;
    }
  }
}

// dx = rstd (dy w - sum(g) / C - xhat sum(g xhat) / C), the group's sums.
__global__ void split_norm_backward_kernel(float* __restrict__ dx, const float* __restrict__ dy,
                                           const float* __restrict__ x, const float* __restrict__ stats,
                                           const float* __restrict__ w, const float* __restrict__ sums,
                                           std::int64_t N, std::int64_t C, float full) {
  for (std::int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const float mean = stats[2 * n], inv = stats[2 * n + 1];
    const float mg = sums[2 * n] / full, mgh = sums[2 * n + 1] / full;
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const float h = (x[n * C + c] - mean) * inv;
      dx[n * C + c] = inv * (dy[n * C + c] * w[c] - mg - h * mgh);
    }
  }
}

}  // namespace

// ---- launchers ----

void split_norm_sums(Tensor& stats, const Tensor& x, const SplitNormOptions& opt) {
  expect_cuda_contiguous({&stats, &x}, "split_norm_sums operand");
  const std::int64_t C = x.dim(-1), N = rows_of(x);
  if (N == 0) return;
  split_norm_sums_kernel<<<blocks_for(N, 1), kRowThreads, 0, compute_stream()>>>(ptr<float>(stats), ptr<float>(x), N,
                                                                                 C, opt.centered);
  TIDAL_CUDA_CHECK_LAUNCH("split_norm_sums_kernel");
}

void split_norm_forward(Tensor& y, Tensor& stats, const Tensor& x, const Tensor& w, const Tensor& b,
                        const SplitNormOptions& opt) {
  expect_cuda_contiguous({&y, &stats, &x, &w}, "split_norm_forward operand");
  if (b.defined()) expect_cuda_contiguous(b, "split_norm_forward b");
  const std::int64_t C = x.dim(-1), N = rows_of(x);
  if (N == 0) return;
  split_norm_forward_kernel<<<blocks_for(N, 1), kRowThreads, 0, compute_stream()>>>(
      ptr<float>(y), ptr<float>(stats), ptr<float>(x), ptr<float>(w), b.defined() ? ptr<float>(b) : nullptr, N, C,
      float(opt.full), opt.eps);
  TIDAL_CUDA_CHECK_LAUNCH("split_norm_forward_kernel");
}

void split_norm_weight_grads(Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& stats) {
  expect_cuda_contiguous({&dw, &dy, &x, &stats}, "split_norm_weight_grads operand");
  if (db.defined()) expect_cuda_contiguous(db, "split_norm_weight_grads db");
  const std::int64_t C = x.dim(-1), N = rows_of(x);
  if (N == 0 || C == 0) return;
  const auto [chunks, rows_per_chunk] = row_chunks(N, 2 * C);
  Tensor partial = Tensor::empty({2, chunks, C}, DType::f32, gpu_allocator());
  const cudaStream_t stream = compute_stream();
  const dim3 grid{unsigned((C + kColumnThreads - 1) / kColumnThreads), unsigned(chunks)};
  split_norm_weight_partial_kernel<<<grid, kColumnThreads, 0, stream>>>(ptr<float>(partial), ptr<float>(dy),
                                                                        ptr<float>(x), ptr<float>(stats), N, C, chunks,
                                                                        rows_per_chunk);
  TIDAL_CUDA_CHECK_LAUNCH("split_norm_weight_partial_kernel");
  split_norm_weight_reduce_kernel<<<blocks_for(C, kColumnThreads), kColumnThreads, 0, stream>>>(
      ptr<float>(dw), db.defined() ? ptr<float>(db) : nullptr, ptr<float>(partial), chunks, C);
  TIDAL_CUDA_CHECK_LAUNCH("split_norm_weight_reduce_kernel");
}

void split_norm_grad_sums(Tensor& sums, const Tensor& dy, const Tensor& x, const Tensor& stats, const Tensor& w,
                          const SplitNormOptions& opt) {
  expect_cuda_contiguous({&sums, &dy, &x, &stats, &w}, "split_norm_grad_sums operand");
  const std::int64_t C = x.dim(-1), N = rows_of(x);
  if (N == 0) return;
  split_norm_grad_sums_kernel<<<blocks_for(N, 1), kRowThreads, 0, compute_stream()>>>(
      ptr<float>(sums), ptr<float>(dy), ptr<float>(x), ptr<float>(stats), ptr<float>(w), N, C, opt.centered);
  TIDAL_CUDA_CHECK_LAUNCH("split_norm_grad_sums_kernel");
}

void split_norm_backward(Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& stats, const Tensor& w,
                         const Tensor& sums, const SplitNormOptions& opt) {
  expect_cuda_contiguous({&dx, &dy, &x, &stats, &w, &sums}, "split_norm_backward operand");
  const std::int64_t C = x.dim(-1), N = rows_of(x);
  if (N == 0) return;
  split_norm_backward_kernel<<<blocks_for(N, 1), kRowThreads, 0, compute_stream()>>>(
      ptr<float>(dx), ptr<float>(dy), ptr<float>(x), ptr<float>(stats), ptr<float>(w), ptr<float>(sums), N, C,
      float(opt.full));
  TIDAL_CUDA_CHECK_LAUNCH("split_norm_backward_kernel");
}

}  // namespace tidal::ops::cuda
