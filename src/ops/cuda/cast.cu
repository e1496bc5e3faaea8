// Casts between fp32, bf16 and fp16 on the GPU: one elementwise kernel for every (source,
// destination) pair, through fp32 and rounded to nearest-even by store<T>() - the CPU backend's
// rounding, so both backends write the same bits (NaN payloads aside: any NaN stays a NaN).
#include "ops/cast.h"

#include "ops/cuda/common.cuh"

namespace tidal::ops::cuda {
namespace {

constexpr int kThreads = 256;

// ---- kernels ----

// Widening to fp32 is exact, so one rounding happens, in store<D>.
template <class S, class D>
__global__ void cast_kernel(D* __restrict__ dst, const S* __restrict__ src, std::int64_t n) {
  TIDAL_CUDA_FOR(i, n) dst[i] = store<D>(load(src[i]));
}

}  // namespace

// ---- launchers ----

void cast(Tensor& dst, const Tensor& src) {
  expect_cuda_contiguous(dst, "cast dst");
  expect_cuda_contiguous(src, "cast src");
  TIDAL_ASSERT(dst.shape() == src.shape(), "cast {} to {}", src.str(), dst.str());
  const std::int64_t n = src.numel();
  if (n == 0) return;
  with_float_type(src.dtype(), [&]<class S>() {
    with_float_type(dst.dtype(), [&]<class D>() {
      cast_kernel<S, D><<<blocks_for(n, kThreads), kThreads, 0, compute_stream()>>>(ptr<D>(dst), ptr<S>(src), n);
    });
  });
  TIDAL_CUDA_CHECK_LAUNCH("cast_kernel");
}

}  // namespace tidal::ops::cuda
