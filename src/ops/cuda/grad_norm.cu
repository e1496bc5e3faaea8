// The sum of squares of a GPU tensor, accumulated in double like the CPU backend's: each block
// sums one chunk of the CPU's size (squares of fp32 values are exact in double) with a fixed tree,
// and one block adds the chunk partials in a fixed order. The same bits on every run, so
// clipping, and with it training, stays reproducible; the sums travel to the host at the end,
// a batch of tensors' sums in one copy (a wait per tensor cost a step some milliseconds).
#include "ops/grad_norm.h"

#include "core/gpu.h"
#include "ops/cuda/common.cuh"

#include <vector>

namespace tidal::ops::cuda {
namespace {

constexpr std::int64_t kChunk = 1 << 14;  // elements per partial (the CPU backend's block)
constexpr int kThreads = 256;             // per chunk
constexpr int kFinishThreads = 1024;      // the one block that adds the partials

// ---- kernels ----

__device__ __forceinline__ double warp_sum_double(double v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32), valid in thread 0. `scratch`: 32 doubles.
__device__ __forceinline__ double block_sum_double(double v, double* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum_double(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0;
  return warp_sum_double(v);
}

// partial[k] = sum of x[i]^2 over chunk k; one block per chunk.
template <class T>
__global__ void chunk_squares_kernel(double* __restrict__ partial, const T* __restrict__ x, std::int64_t n) {
  __shared__ double scratch[32];
  const std::int64_t begin = std::int64_t(blockIdx.x) * kChunk;
  const std::int64_t end = begin + kChunk < n ? begin + kChunk : n;
  double s = 0.0;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double v = load(x[i]);
    s += v * v;
  }
  s = block_sum_double(s, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// *total = sum of partial[0, chunks); one block.
__global__ void sum_partials_kernel(double* __restrict__ total, const double* __restrict__ partial,
                                    std::int64_t chunks) {
  __shared__ double scratch[32];
  double s = 0.0;
  for (std::int64_t k = threadIdx.x; k < chunks; k += blockDim.x) s += partial[k];
  s = block_sum_double(s, scratch);
  if (threadIdx.x == 0) *total = s;
}

}  // namespace

// ---- launchers ----

std::vector<double> sums_of_squares(std::span<const Tensor> xs) {
  // Per tensor: its chunks' partials, then its total; the totals sit together at the end of one
  // scratch buffer (doubles, held as fp32 pairs: the pool's blocks are 256-byte aligned), so one
  // copy brings them all back and the host waits once for the whole batch.
  std::vector<std::int64_t> first_partial(xs.size());
  std::int64_t partials = 0;
  for (std::size_t k = 0; k < xs.size(); ++k) {
    expect_cuda_contiguous(xs[k], "sum_of_squares x");
    const std::int64_t chunks = (xs[k].numel() + kChunk - 1) / kChunk;
    TIDAL_ASSERT(chunks <= 0x7fffffff, "sum_of_squares: {} elements", xs[k].numel());
    first_partial[k] = partials;
    partials += chunks;
  }
  std::vector<double> sums(xs.size(), 0.0);
  if (xs.empty()) return sums;
  const std::int64_t count = std::int64_t(xs.size());
  Tensor scratch = Tensor::empty(Shape{2 * (partials + count)}, DType::f32, gpu_allocator());
  double* partial = static_cast<double*>(scratch.raw());
  double* totals = partial + partials;
  TIDAL_CUDA_CALL(cudaMemsetAsync(totals, 0, std::size_t(count) * sizeof(double), compute_stream()));
  for (std::size_t k = 0; k < xs.size(); ++k) {
    const std::int64_t n = xs[k].numel();
    if (n == 0) continue;
    const std::int64_t chunks = (n + kChunk - 1) / kChunk;
    with_float_type(xs[k].dtype(), [&]<class T>() {
      chunk_squares_kernel<T><<<unsigned(chunks), kThreads, 0, compute_stream()>>>(partial + first_partial[k],
                                                                                   ptr<T>(xs[k]), n);
    });
    TIDAL_CUDA_CHECK_LAUNCH("chunk_squares_kernel");
    sum_partials_kernel<<<1, kFinishThreads, 0, compute_stream()>>>(totals + k, partial + first_partial[k], chunks);
    TIDAL_CUDA_CHECK_LAUNCH("sum_partials_kernel");
  }
  copy_bytes(sums.data(), Device::cpu(), totals, scratch.device(), sums.size() * sizeof(double));  // waits
  return sums;
}

double sum_of_squares(const Tensor& x) { return sums_of_squares(std::span<const Tensor>(&x, 1))[0]; }

}  // namespace tidal::ops::cuda
