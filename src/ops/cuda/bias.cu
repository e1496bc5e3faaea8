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

// y [N, C] += b [C], V columns an access (C a multiple of V): threads (x) over a row's packs,
// blocks (y) over the rows, so no thread divides an index to find its column.
template <int V, class T>
__global__ void bias_add_kernel(T* __restrict__ y, const T* __restrict__ b, std::int64_t N, std::int64_t C) {
  const std::int64_t packs = C / V;
  for (std::int64_t c = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; c < packs;
       c += std::int64_t(gridDim.x) * blockDim.x) {
    const Pack<V, T> bias = load_pack<V>(b + c * V);
    for (std::int64_t r = blockIdx.y; r < N; r += gridDim.y) {
      T* row = y + r * C + c * V;
      Pack<V, T> x = load_pack<V>(row);
#pragma unroll
      for (int e = 0; e < V; ++e) x.v[e] = store<T>(load(x.v[e]) + load(bias.v[e]));
      store_pack<V>(row, x);
    }
  }
}

template <int V, class T>
void launch_bias_add(T* y, const T* b, std::int64_t N, std::int64_t C) {
  const std::int64_t packs = C / V;
  const int threads = int(std::min<std::int64_t>(kThreads, (packs + 31) / 32 * 32));
  const dim3 grid{unsigned(std::min<std::int64_t>((packs + threads - 1) / threads, 65535)),
                  unsigned(std::min<std::int64_t>(N, 65535))};
  bias_add_kernel<V, T><<<grid, threads, 0, compute_stream()>>>(y, b, N, C);
}

// partial [chunks, C]: partial[k, c] = sum of dy[r, c] over the rows r of chunk k. Block
// (kTileCols, kRowLanes), each thread P adjacent columns (C a multiple of P, dy aligned for it; or
// P = 1); grid (column tiles of kTileCols * P, chunks). Each column's order (a lane's rows in turn,
// then the lanes in order) does not depend on P.
template <int P, class T>
__global__ void bias_grad_partial_kernel(float* __restrict__ partial, const T* __restrict__ dy, std::int64_t N,
                                         std::int64_t C, std::int64_t rows_per_chunk) {
  __shared__ float lane_sums[kRowLanes][kTileCols * P];
  const std::int64_t c = (std::int64_t(blockIdx.x) * kTileCols + threadIdx.x) * P;
  const std::int64_t r0 = std::int64_t(blockIdx.y) * rows_per_chunk;
  const std::int64_t r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
  float acc[P] = {};
  if (c < C)
    for (std::int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) {
      const Pack<P, T> x = load_pack<P>(dy + r * C + c);
#pragma unroll
      for (int e = 0; e < P; ++e) acc[e] += load(x.v[e]);
    }
#pragma unroll
  for (int e = 0; e < P; ++e) lane_sums[threadIdx.y][threadIdx.x * P + e] = acc[e];
  __syncthreads();
  if (threadIdx.y == 0 && c < C)
#pragma unroll
    for (int e = 0; e < P; ++e) {
      float s = 0.0f;
      for (int lane = 0; lane < kRowLanes; ++lane) s += lane_sums[lane][threadIdx.x * P + e];
      partial[std::int64_t(blockIdx.y) * C + c + e] = s;
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
    constexpr int V = kPackOf<T>;
    if (rows_in_packs<V>(C, ptr<T>(y), ptr<T>(b)))
      launch_bias_add<V>(ptr<T>(y), ptr<T>(b), n / C, C);
    else
      launch_bias_add<1>(ptr<T>(y), ptr<T>(b), n / C, C);
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
  Tensor partial = Tensor::empty(Shape{chunks, C}, DType::f32, gpu_allocator());  // [chunks, C]
  with_float_type(dy.dtype(), [&]<class T>() {
    constexpr int P = kPackOf<T>;
    const bool packed = rows_in_packs<P>(C, ptr<T>(dy));
    const std::int64_t tile_cols = kTileCols * (packed ? P : 1), tiles = (C + tile_cols - 1) / tile_cols;
    TIDAL_ASSERT(tiles <= 0x7fffffff, "bias_grad: {} columns", C);
    const dim3 grid{unsigned(tiles), unsigned(chunks)}, block{unsigned(kTileCols), unsigned(kRowLanes)};
    if (packed)
      bias_grad_partial_kernel<P, T>
          <<<grid, block, 0, compute_stream()>>>(ptr<float>(partial), ptr<T>(dy), N, C, rows_per_chunk);
    else
      bias_grad_partial_kernel<1, T>
          <<<grid, block, 0, compute_stream()>>>(ptr<float>(partial), ptr<T>(dy), N, C, rows_per_chunk);
    TIDAL_CUDA_CHECK_LAUNCH("bias_grad_partial_kernel");
    bias_grad_finish_kernel<T>
        <<<blocks_for(C, kThreads), kThreads, 0, compute_stream()>>>(ptr<T>(db), ptr<float>(partial), chunks, C);
    TIDAL_CUDA_CHECK_LAUNCH("bias_grad_finish_kernel");
  });
}

}  // namespace tidal::ops::cuda
