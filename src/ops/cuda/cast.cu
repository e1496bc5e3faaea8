// Casts between fp32, bf16 and fp16 on the GPU: one elementwise kernel for every (source,
// destination) pair, through fp32 and rounded to nearest-even by store<T>() - the CPU backend's
// rounding, so both backends write the same bits (NaN payloads aside: any NaN stays a NaN).
#include "ops/cast.h"

#include "ops/cuda/common.cuh"

namespace tidal::ops::cuda {
namespace {

// Widening to fp32 is exact, so one rounding happens, in store<D>.
struct Identity {
  __device__ float operator()(float x) const { return x; }
};

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
      map_elements(ptr<D>(dst), n, Identity{}, ptr<S>(src));
    });
  });
  TIDAL_CUDA_CHECK_LAUNCH("cast map_kernel");
}

}  // namespace tidal::ops::cuda
