#include "ops/cast.h"

#include "ops/cpu/typed.h"

namespace tidal::ops::cpu {

void cast(Tensor& dst, const Tensor& src) {
  expect_cpu_contiguous(dst, "cast dst");
  expect_cpu_contiguous(src, "cast src");
  TIDAL_ASSERT(dst.shape() == src.shape(), "cast {} to {}", src.str(), dst.str());
  const std::int64_t n = src.numel();
  if (dst.dtype() == src.dtype()) {  // a gradient into its chunk's slot: the bytes as they are
    dst.copy_from(src);
    return;
  }
  with_float_type(src.dtype(), [&]<class S>() {
    with_float_type(dst.dtype(), [&]<class D>() {
      const S* ps = src.data<S>();
      D* pd = dst.data<D>();
#pragma omp parallel for simd schedule(static)
      for (std::int64_t i = 0; i < n; ++i) pd[i] = from_float<D>(to_float(ps[i]));
    });
  });
}

}  // namespace tidal::ops::cpu
