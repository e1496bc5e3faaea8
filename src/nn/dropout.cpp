#include "nn/dropout.h"

#include "core/philox.h"
#include "ops/dropout.h"

namespace tidal::nn {
namespace {
ops::DropoutKey key_for(const std::string& path, const StepState& s) {
  return {.seed = s.seed, .layer = fnv1a64(path.data(), path.size()), .step = s.step, .micro_batch = s.micro_batch};
}
}  // namespace

Tensor Dropout::forward(const Tensor& x, Context& ctx) {
  if (!active(ctx)) return x;
  Tensor y = ctx.empty(x.shape(), x.dtype());
  ops::dropout_forward(y, x, p_, key_for(path(), ctx.state()));
  return y;
}

Tensor Dropout::backward(const Tensor& dy, Context& ctx) {
  if (!active(ctx)) return dy;
  Tensor dx = ctx.empty(dy.shape(), dy.dtype());
  ops::dropout_backward(dx, dy, p_, key_for(path(), ctx.state()));
  return dx;
}

}  // namespace tidal::nn
