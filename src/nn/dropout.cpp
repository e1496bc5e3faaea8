#include "nn/dropout.h"

#include "core/philox.h"
#include "ops/dropout.h"

namespace tidal::nn {
namespace {
// x is [B, ...] with B the micro-batch: element 0 of sample b is global element
// (first_sample + b) * (numel / B) of the step's batch.
ops::DropoutKey key_for(const std::string& path, std::uint64_t stream, const StepState& s, const Tensor& x) {
  const std::int64_t per_sample = x.numel() / x.dim(0);
  return {.seed = s.seed,
          .layer = fnv1a64(path.data(), path.size()) + stream * 0x9e3779b97f4a7c15ull,
          .step = s.step,
          .first_element = s.first_sample * per_sample};
}
}  // namespace

Tensor Dropout::forward(const Tensor& x, Context& ctx) {
  if (!active(ctx)) return x;
  Tensor y = ctx.empty(x.shape(), x.dtype());
  ops::dropout_forward(y, x, p_, key_for(path(), stream_, ctx.state(), x));
  return y;
}

Tensor Dropout::backward(const Tensor& dy, Context& ctx) {
  if (!active(ctx)) return dy;
  Tensor dx = ctx.empty(dy.shape(), dy.dtype());
  ops::dropout_backward(dx, dy, p_, key_for(path(), stream_, ctx.state(), dy));
  return dx;
}

}  // namespace tidal::nn
