#include "nn/dropout.h"

#include "core/philox.h"
#include "ops/dropout.h"

namespace tidal::nn {

// Rows [r.b0, r.b1) of t and, when positions are split, their positions [r.p0, r.p1).
Tensor Dropout::Run::of(const Tensor& t) const {
  const Tensor samples = t.slice(0, b0, b1);
  return p1 < 0 ? samples : samples.slice(1, p0, p1);
}

template <class Fn>
void Dropout::for_each_run(const Context& ctx, const Tensor& x, Fn fn) const {
  const StepState& s = ctx.state();
  ops::DropoutKey key{.seed = s.seed,
                      .layer = fnv1a64(path().data(), path().size()) + stream_ * 0x9e3779b97f4a7c15ull,
                      .step = s.step};
  // x is [B, T', ...] with B the micro-batch; the single process's sample b starts at global
  // element (first_sample + b) * per_sample, and a run of this rank's positions starting at global
  // position p, p * per_position elements into it.
  const std::int64_t B = x.dim(0), local = x.numel() / B;
  const std::int64_t per_sample = local * positions_.position_parts;
  if (positions_.position_parts == 1) {  // the whole micro-batch is one contiguous run
    key.first_element = s.first_sample * per_sample;
    return fn(key, Run{0, B, 0, -1});
  }
  const std::int64_t T = x.dim(1), per_position = local / T;
  for (std::int64_t b = 0; b < B; ++b)
    for (const PositionRun& r : positions_.position_runs(T)) {
      key.first_element = (s.first_sample + b) * per_sample + r.global * per_position;
      fn(key, Run{b, b + 1, r.local, r.local + r.length});
    }
}

Tensor Dropout::forward(const Tensor& x, Context& ctx) {
  if (!active(ctx)) return x;
  Tensor y = ctx.empty(x.shape(), x.dtype());
  for_each_run(ctx, x, [&](const ops::DropoutKey& key, const Run& r) {
    Tensor part = r.of(y);
    ops::dropout_forward(part, r.of(x), p_, key);
  });
  return y;
}

Tensor Dropout::backward(const Tensor& dy, Context& ctx) {
  if (!active(ctx)) return dy;
  Tensor dx = ctx.empty(dy.shape(), dy.dtype());
  for_each_run(ctx, dy, [&](const ops::DropoutKey& key, const Run& r) {
    Tensor part = r.of(dx);
    ops::dropout_backward(part, r.of(dy), p_, key);
  });
  return dx;
}

}  // namespace tidal::nn
