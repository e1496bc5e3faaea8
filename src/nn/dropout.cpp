#include "nn/dropout.h"

#include "core/philox.h"
#include "ops/dropout.h"

namespace tidal::nn {

template <class Fn>
void Dropout::for_each_run(const Context& ctx, const Tensor& x, Fn fn) const {
  const StepState& s = ctx.state();
  ops::DropoutKey key{.seed = s.seed,
                      .layer = fnv1a64(path().data(), path().size()) + stream_ * 0x9e3779b97f4a7c15ull,
                      .step = s.step};
  // x is [B, T', ...] with B the micro-batch; the single process's sample b starts at global
  // element (first_sample + b) * per_sample, and this rank's positions `offset` elements into it.
  const std::int64_t B = x.dim(0), local = x.numel() / B, per_sample = local * positions_.position_parts;
  const std::int64_t offset = positions_.position_index * local;
  const std::int64_t run = positions_.position_parts == 1 ? B : 1;  // samples per contiguous run
  for (std::int64_t b = 0; b < B; b += run) {
    key.first_element = (s.first_sample + b) * per_sample + offset;
    fn(key, b, b + run);
  }
}

Tensor Dropout::forward(const Tensor& x, Context& ctx) {
  if (!active(ctx)) return x;
  Tensor y = ctx.empty(x.shape(), x.dtype());
  for_each_run(ctx, x, [&](const ops::DropoutKey& key, std::int64_t b0, std::int64_t b1) {
    Tensor part = y.slice(0, b0, b1);
    ops::dropout_forward(part, x.slice(0, b0, b1), p_, key);
  });
  return y;
}

Tensor Dropout::backward(const Tensor& dy, Context& ctx) {
  if (!active(ctx)) return dy;
  Tensor dx = ctx.empty(dy.shape(), dy.dtype());
  for_each_run(ctx, dy, [&](const ops::DropoutKey& key, std::int64_t b0, std::int64_t b1) {
    Tensor part = dx.slice(0, b0, b1);
    ops::dropout_backward(part, dy.slice(0, b0, b1), p_, key);
  });
  return dx;
}

}  // namespace tidal::nn
