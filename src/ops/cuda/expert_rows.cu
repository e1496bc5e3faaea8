// The row moves of a mixture of experts on the GPU (ops/expert_rows.h): a thread per output
// element, grid-stride; a combined element sums its token's picks in pick order, and a slot's dot
// product is one warp's, so no sum depends on scheduling.
#include "ops/expert_rows.h"

#include "ops/cuda/common.cuh"

namespace tidal::ops::cuda {
namespace {

constexpr int kThreads = 256;

// ---- kernels ----

template <class T>
__global__ void gather_rows_kernel(T* __restrict__ out, const T* __restrict__ x, const std::int32_t* __restrict__ rows,
                                   const float* __restrict__ scale, std::int64_t n, std::int64_t C) {
  TIDAL_CUDA_FOR(i, n) {
    const std::int64_t p = i / C, c = i % C;
    const std::int32_t row = rows[p];
    out[i] = row < 0 ? store<T>(0.0f) : store<T>(load(x[std::int64_t(row) * C + c]) * (scale ? scale[p] : 1.0f));
  }
}

template <class T>
__global__ void combine_rows_kernel(T* __restrict__ out, const T* __restrict__ src,
                                    const std::int32_t* __restrict__ slots, const float* __restrict__ weights,
                                    std::int64_t n, std::int64_t C, std::int64_t k) {
  TIDAL_CUDA_FOR(i, n) {
    const std::int64_t row = i / C, c = i % C;
    float acc = 0.0f;
    for (std::int64_t j = 0; j < k; ++j) {
      const std::int32_t p = slots[row * k + j];
      if (p >= 0) acc += (weights ? weights[row * k + j] : 1.0f) * load(src[std::int64_t(p) * C + c]);
    }
    out[i] = store<T>(acc);
  }
}

// A warp per (row, pick): lanes stride the features, then a fixed butterfly sums them.
template <class T>
__global__ void slot_dots_kernel(float* __restrict__ out, const T* __restrict__ a, const T* __restrict__ src,
                                 const std::int32_t* __restrict__ slots, std::int64_t pairs, std::int64_t C,
                                 std::int64_t k) {
  const std::int64_t warps = std::int64_t(gridDim.x) * (blockDim.x / 32);
  const int lane = threadIdx.x % 32;
  for (std::int64_t w = blockIdx.x * std::int64_t(blockDim.x / 32) + threadIdx.x / 32; w < pairs; w += warps) {
    const std::int32_t p = slots[w];
    float dot = 0.0f;
    if (p >= 0) {
      const T* x = a + (w / k) * C;
      const T* y = src + std::int64_t(p) * C;
      for (std::int64_t c = lane; c < C; c += 32) dot += load(x[c]) * load(y[c]);
    }
    for (int off = 16; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
    if (lane == 0) out[w] = dot;
  }
}

}  // namespace

// ---- launchers ----

void gather_rows(Tensor& out, const Tensor& x, const Tensor& rows, const Tensor& scale) {
  expect_cuda_contiguous({&out, &x, &rows}, "gather_rows operand");
  TIDAL_ASSERT(out.ndim() == 2 && x.ndim() == 2 && out.dim(1) == x.dim(1) && out.dtype() == x.dtype() &&
                   rows.dtype() == DType::i32 && rows.numel() == out.dim(0) &&
                   (!scale.defined() || (scale.numel() == out.dim(0) && scale.device().is_cuda())),
               "gather_rows: out {}, x {}, rows {}", out.str(), x.str(), rows.str());
  const std::int64_t n = out.numel(), C = out.dim(1);
  if (n == 0) return;
  with_float_type(x.dtype(), [&]<class T>() {
    gather_rows_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, compute_stream()>>>(
        ptr<T>(out), ptr<T>(x), ptr<std::int32_t>(rows), scale.defined() ? ptr<float>(scale) : nullptr, n, C);
  });
  TIDAL_CUDA_CHECK_LAUNCH("gather_rows_kernel");
}

void combine_rows(Tensor& out, const Tensor& src, const Tensor& slots, const Tensor& weights) {
  expect_cuda_contiguous({&out, &src, &slots}, "combine_rows operand");
  TIDAL_ASSERT(out.ndim() == 2 && src.ndim() == 2 && out.dim(1) == src.dim(1) && out.dtype() == src.dtype() &&
                   slots.dtype() == DType::i32 && slots.ndim() == 2 && slots.dim(0) == out.dim(0) &&
                   (!weights.defined() || (weights.shape() == slots.shape() && weights.device().is_cuda())),
               "combine_rows: out {}, src {}, slots {}", out.str(), src.str(), slots.str());
  const std::int64_t n = out.numel(), C = out.dim(1), k = slots.dim(1);
  if (n == 0) return;
  with_float_type(src.dtype(), [&]<class T>() {
    combine_rows_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, compute_stream()>>>(
        ptr<T>(out), ptr<T>(src), ptr<std::int32_t>(slots), weights.defined() ? ptr<float>(weights) : nullptr, n, C,
        k);
  });
  TIDAL_CUDA_CHECK_LAUNCH("combine_rows_kernel");
}

void slot_dots(Tensor& out, const Tensor& a, const Tensor& src, const Tensor& slots) {
  expect_cuda_contiguous({&out, &a, &src, &slots}, "slot_dots operand");
  TIDAL_ASSERT(a.ndim() == 2 && src.ndim() == 2 && a.dim(1) == src.dim(1) && a.dtype() == src.dtype() &&
                   out.dtype() == DType::f32 && out.shape() == slots.shape() && slots.dim(0) == a.dim(0),
               "slot_dots: out {}, a {}, src {}, slots {}", out.str(), a.str(), src.str(), slots.str());
  const std::int64_t pairs = out.numel(), C = a.dim(1), k = slots.dim(1);
  if (pairs == 0) return;
  with_float_type(a.dtype(), [&]<class T>() {
    slot_dots_kernel<T><<<blocks_for(pairs * 32, kThreads), kThreads, 0, compute_stream()>>>(
        ptr<float>(out), ptr<T>(a), ptr<T>(src), ptr<std::int32_t>(slots), pairs, C, k);
  });
  TIDAL_CUDA_CHECK_LAUNCH("slot_dots_kernel");
}

}  // namespace tidal::ops::cuda
