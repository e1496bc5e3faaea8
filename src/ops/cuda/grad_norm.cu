// The sum of squares of a GPU tensor, accumulated in double like the CPU backend's: each block
// sums one chunk of the CPU's size (squares of fp32 values are exact in double) with a fixed tree,
// and one block adds the chunk partials in a fixed order. The same bits on every run, so
// clipping, and with it training, stays reproducible; the sum travels to the host at the end.
#include "ops/grad_norm.h"

#include "core/gpu.h"
#include "ops/cuda/common.cuh"

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

double sum_of_squares(const Tensor& x) {
  expect_cuda_contiguous(x, "sum_of_squares x");
  const std::int64_t n = x.numel();
  if (n == 0) return 0.0;
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  TIDAL_ASSERT(chunks <= 0x7fffffff, "sum_of_squares: {} elements", n);
  // chunks partials, then the total: doubles, in a buffer counted as fp32 pairs (the pool's
  // blocks are 256-byte aligned).
  Tensor scratch = Tensor::empty(Shape{2 * (chunks + 1)}, DType::f32, gpu_allocator());
  double* partial = static_cast<double*>(scratch.raw());
  double* total = partial + chunks;
  with_float_type(x.dtype(), [&]<class T>() {
    chunk_squares_kernel<T><<<unsigned(chunks), kThreads, 0, compute_stream()>>>(partial, ptr<T>(x), n);
  });
  TIDAL_CUDA_CHECK_LAUNCH("chunk_squares_kernel");
  sum_partials_kernel<<<1, kFinishThreads, 0, compute_stream()>>>(total, partial, chunks);
  TIDAL_CUDA_CHECK_LAUNCH("sum_partials_kernel");
  double result = 0.0;
  copy_bytes(&result, Device::cpu(), total, scratch.device(), sizeof(double));  // waits for the sum
  return result;
}

}  // namespace tidal::ops::cuda
