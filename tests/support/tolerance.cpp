#include "support/tolerance.h"

#include "ops/cast.h"

#include <cmath>

namespace tidal::testing {
namespace {
Tensor as_f32(const Tensor& device_tensor) {
  const Tensor t = device_tensor.device().is_cuda() ? device_tensor.clone(host_allocator()) : device_tensor;
  if (t.dtype() == DType::f32) return t;
  Tensor out = Tensor::empty(t.shape());
  if (t.dtype() == DType::i32) {
    for (std::int64_t i = 0; i < t.numel(); ++i) out.data<float>()[i] = float(t.data<std::int32_t>()[i]);
  } else {
    ops::cast(out, t);
  }
  return out;
}
}  // namespace

::testing::AssertionResult all_close(const Tensor& got, const Tensor& ref, Tolerance tol) {
  if (got.numel() != ref.numel())
    return ::testing::AssertionFailure() << "shape " << got.str() << " vs reference " << ref.str();
  const Tensor g = as_f32(got), r = as_f32(ref);
  const float* pg = g.data<float>();
  const float* pr = r.data<float>();
  std::int64_t worst = -1;
  double worst_excess = 0.0, max_abs = 0.0;
  for (std::int64_t i = 0; i < g.numel(); ++i) {
    // Equal values (infinities included) and NaN against NaN agree.
    const bool same = pg[i] == pr[i] || (std::isnan(pg[i]) && std::isnan(pr[i]));
    const double diff = same ? 0.0 : std::fabs(double(pg[i]) - double(pr[i]));
    max_abs = std::max(max_abs, std::isnan(diff) ? INFINITY : diff);
    const double excess = std::isnan(diff) ? INFINITY : diff - (tol.atol + tol.rtol * std::fabs(double(pr[i])));
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  if (worst < 0) return ::testing::AssertionSuccess() << "max |diff| " << max_abs;
  return ::testing::AssertionFailure() << "worst element " << worst << " of " << got.str() << ": got " << pg[worst]
                                       << ", reference " << pr[worst] << " (exceeds atol " << tol.atol << " + rtol "
                                       << tol.rtol << " by " << worst_excess << "; max |diff| " << max_abs << ")";
}

}  // namespace tidal::testing
