#include "ops/cast.h"

#include "ops/cpu/typed.h"

#include <algorithm>
#include <cstring>

namespace tidal::ops::cpu {

void cast(Tensor& dst, const Tensor& src) {
  expect_cpu_contiguous(dst, "cast dst");
  expect_cpu_contiguous(src, "cast src");
  TIDAL_ASSERT(dst.shape() == src.shape(), "cast {} to {}", src.str(), dst.str());
  const std::int64_t n = src.numel();
  if (dst.dtype() == src.dtype()) {  // a copy (a gradient into its chunk's slot): bytes, in blocks
    const std::size_t bytes = std::size_t(n) * dtype_size(src.dtype()), block = std::size_t(1) << 20;
    const auto* from = static_cast<const char*>(src.raw());
    auto* to = static_cast<char*>(dst.raw());
    const std::int64_t blocks = std::int64_t((bytes + block - 1) / block);
#pragma omp parallel for schedule(static) if (blocks > 1)
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::size_t at = std::size_t(b) * block;
      std::memcpy(to + at, from + at, std::min(block, bytes - at));
    }
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
