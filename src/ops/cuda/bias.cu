// Bias add and bias gradient on the GPU. The gradient's column sums are deterministic: each
// block sums a fixed chunk of rows for 32 columns into a partial buffer, and a second kernel adds
// the chunks of each column in chunk order. The partition depends only on the shape, so two runs
// give the same bits (they differ from the CPU's row-by-row order by fp32 rounding).
#include "ops/bias.h"

#include "core/gpu.h"
#include "ops/cuda/common.cuh"

#include <algorithm>

namespace tidal::ops::cuda {
namespace {

constexpr int kThreads = 256;
// bias_grad's partial-sum blocks: a warp spans kTileCols adjacent columns (coalesced reads of a
// row), kRowLanes warps stride down the chunk's rows.
constexpr int kTileCols = 32;
constexpr int kRowLanes = 8;
// A chunk has at least kMinRowsPerChunk rows, and there are at most kMaxChunks of them (so the
// partial buffer and the second pass stay small, and gridDim.y stays far under its limit).
constexpr std::int64_t kMinRowsPerChunk = 64;
constexpr std::int64_t kMaxChunks = 1024;

// ---- kernels ----

// y [N, C] += b [C]; n = N * C.
template <class T>
__global__ void bias_add_kernel(T* __restrict__ y, const T* __restrict__ b, std::int64_t n, std::int64_t C) {
  TIDAL_CUDA_FOR(i, n) { y[i] = store<T>(load(y[i]) + load(b[i % C])); }
}

// partial [chunks, C]: partial[k, c] = sum of dy[r, c] over the rows r of chunk k. Block
// (kTileCols, kRowLanes); grid (column tiles, chunks).
template <class T>
__global__ void bias_grad_partial_kernel(float* __restrict__ partial, const T* __restrict__ dy, std::int64_t N,
                                         std::int64_t C, std::int64_t rows_per_chunk) {
  __shared__ float lane_sums[kRowLanes][kTileCols];
  const std::int64_t c = std::int64_t(blockIdx.x) * kTileCols + threadIdx.x;
  const std::int64_t r0 = std::int64_t(blockIdx.y) * rows_per_chunk;
  const std::int64_t r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
  float acc = 0.0f;
  if (c < C)
    for (std::int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) acc += load(dy[r * C + c]);
  lane_sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float s = 0.0f;
    for (int lane = 0; lane < kRowLanes; ++lane) s += lane_sums[lane][threadIdx.x];
    partial[std::int64_t(blockIdx.y) * C + c] = s;
  }
}

// db [C] += sum over k of partial [chunks, C], in chunk order.
template <class T>
__global__ void bias_grad_finish_kernel(T* __restrict__ db, const float* __restrict__ partial, std::int64_t chunks,
                                        std::int64_t C) {
  TIDAL_CUDA_FOR(c, C) {
    float s = 0.0f;
    for (std::int64_t k = 0; k < chunks; ++k) s += partial[k * C + c];
    db[c] = store<T>(load(db[c]) + s);
  }
}

}  // namespace

// ---- launchers ----

void bias_add(Tensor& y, const Tensor& b) {
  expect_cuda_contiguous(y, "bias_add y");
  expect_cuda_contiguous(b, "bias_add b");
  const std::int64_t C = b.numel();
  TIDAL_ASSERT(y.ndim() >= 1 && y.dim(-1) == C && y.dtype() == b.dtype(), "bias_add {} + {}", y.str(), b.str());
  const std::int64_t n = y.numel();
  if (n == 0) return;
  with_float_type(y.dtype(), [&]<class T>() {
    bias_add_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, compute_stream()>>>(ptr<T>(y), ptr<T>(b), n, C);
  });
  TIDAL_CUDA_CHECK_LAUNCH("bias_add_kernel");
}

void bias_grad(Tensor& db, const Tensor& dy) {
  expect_cuda_contiguous(db, "bias_grad db");
  expect_cuda_contiguous(dy, "bias_grad dy");
  const std::int64_t C = db.numel();
  TIDAL_ASSERT(dy.ndim() >= 1 && dy.dim(-1) == C && dy.dtype() == db.dtype(), "bias_grad {} from {}", db.str(),
               dy.str());
  if (C == 0 || dy.numel() == 0) return;  // nothing to add
  const std::int64_t N = rows_of(dy);
  const std::int64_t rows_per_chunk = std::max(kMinRowsPerChunk, (N + kMaxChunks - 1) / kMaxChunks);
  const std::int64_t chunks = (N + rows_per_chunk - 1) / rows_per_chunk;
  const std::int64_t tiles = (C + kTileCols - 1) / kTileCols;
  TIDAL_ASSERT(tiles <= 0x7fffffff, "bias_grad: {} columns", C);
  Tensor partial = Tensor::empty(Shape{chunks, C}, DType::f32, gpu_allocator());  // [chunks, C]
  with_float_type(dy.dtype(), [&]<class T>() {
    bias_grad_partial_kernel<T><<<dim3(unsigned(tiles), unsigned(chunks)), dim3(kTileCols, kRowLanes), 0,
                                  compute_stream()>>>(ptr<float>(partial), ptr<T>(dy), N, C, rows_per_chunk);
    TIDAL_CUDA_CHECK_LAUNCH("bias_grad_partial_kernel");
    bias_grad_finish_kernel<T>
        <<<blocks_for(C, kThreads), kThreads, 0, compute_stream()>>>(ptr<T>(db), ptr<float>(partial), chunks, C);
    TIDAL_CUDA_CHECK_LAUNCH("bias_grad_finish_kernel");
  });
}

}  // namespace tidal::ops::cuda
