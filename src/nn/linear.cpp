#include "nn/linear.h"

#include "core/gpu.h"
#include "nn/fp8_linear.h"
#include "ops/bias.h"
#include "ops/gemm.h"

#include <algorithm>

namespace tidal::nn {
namespace {

// An NF4 weight's products take it a tile at a time (QLoRA dequantizes, then multiplies; here block
// by block), so that a step holds about this many of its elements in the compute dtype (8 MiB in
// bf16) beside the tile's product, not the whole weight.
constexpr std::int64_t kNf4TileElements = std::int64_t(1) << 22;

// A temporary of the step (its memory's peak counts it) where the step's memory is the codes'.
Tensor step_temporary(const Shape& shape, DType dtype, const ops::Nf4Weight& codes) {
  const Device device = codes.codes.device();
  Allocator& step = default_allocator();
  return Tensor::empty(shape, dtype, step.device() == device ? step : allocator_on(device));
}

// The first n columns of `buffer` [N, >= n] as a contiguous [N, n].
Tensor leading_columns(const Tensor& buffer, std::int64_t n) {
  return buffer.reshape({-1}).slice(0, 0, buffer.dim(0) * n).reshape({buffer.dim(0), n});
}

// y2 = x2 W^T (+ b), W's rows (y's columns) a tile at a time.
void nf4_forward(Tensor& y2, const Tensor& x2, const ops::Nf4Weight& w, const Parameter* bias) {
  const std::int64_t out = w.shape[0], in = w.shape[1];
  const std::int64_t rows = std::clamp<std::int64_t>(kNf4TileElements / std::max<std::int64_t>(in, 1), 1, out);
  Tensor tile = step_temporary({rows, in}, x2.dtype(), w);
  Tensor part = step_temporary({x2.dim(0), rows}, y2.dtype(), w);
  for (std::int64_t r = 0; r < out; r += rows) {
    const std::int64_t n = std::min(rows, out - r);
    Tensor wt = tile.slice(0, 0, n);
    ops::nf4_dequantize(wt, w, {.first_row = r, .first_col = 0});
    const Tensor b = bias ? bias->data.slice(0, r, r + n) : Tensor();
    Tensor yt = leading_columns(part, n);
    ops::gemm(yt, x2, wt, {.trans_b = true, .bias = bias ? &b : nullptr});
    y2.slice(1, r, r + n).copy_from(yt);
  }
}

// dx2 = dy2 W, W's columns (dx's columns) a tile at a time: each element of dx one product, as
// without tiles.
void nf4_input_gradient(Tensor& dx2, const Tensor& dy2, const ops::Nf4Weight& w) {
  const std::int64_t out = w.shape[0], in = w.shape[1];
  const std::int64_t cols = std::clamp<std::int64_t>(kNf4TileElements / std::max<std::int64_t>(out, 1), 1, in);
  Tensor tile = step_temporary({out, cols}, dy2.dtype(), w);
  Tensor part = step_temporary({dy2.dim(0), cols}, dx2.dtype(), w);
  for (std::int64_t c = 0; c < in; c += cols) {
    const std::int64_t n = std::min(cols, in - c);
    Tensor wt = n == cols ? tile : leading_columns(tile, n);
    ops::nf4_dequantize(wt, w, {.first_row = 0, .first_col = c});
    Tensor dxt = leading_columns(part, n);
    ops::gemm(dxt, dy2, wt);
    dx2.slice(1, c, c + n).copy_from(dxt);
  }
}

// Whether w's products go a tile at a time.
bool tiled(const Parameter& w) { return w.nf4 && w.shape.numel() > kNf4TileElements; }

// A W pass holds the layer's output gradient beside the input it keeps anyway: where that is more
// than this many times the input (an LM head's: vocabulary / width), its W runs in B instead, or a
// stage holding W's back would hold logits gradients (5.8 GB at GPT-2 medium's 7 W's of 4 x 1024
// tokens).
constexpr std::int64_t kDeferredGradientRatio = 8;

}  // namespace

Tensor linear_weight(const Parameter& weight, DType dtype) {
  if (!weight.nf4) return weight.data;
  Tensor w = step_temporary(weight.shape, dtype, *weight.nf4);
  ops::nf4_dequantize(w, *weight.nf4);
  return w;
}

void linear_forward(Tensor& y2, const Tensor& x2, const Parameter& weight, const Parameter* bias, bool fp8) {
  if (tiled(weight)) return nf4_forward(y2, x2, *weight.nf4, bias);
  if (fp8 && fp8_applies(x2, weight)) {
    fp8_forward(y2, x2, weight.data);
    if (bias) ops::bias_add(y2, bias->data);
    return;
  }
  ops::gemm(y2, x2, linear_weight(weight, x2.dtype()), {.trans_b = true, .bias = bias ? &bias->data : nullptr});
}

void linear_backward(Tensor& dx2, const Tensor& dy2, const Tensor& x2, Parameter& weight, Parameter* bias,
                     const Context& ctx, bool fp8) {
  fp8 = fp8 && fp8_applies(x2, weight);
  if (tiled(weight)) nf4_input_gradient(dx2, dy2, *weight.nf4);
  else if (fp8) fp8_input_gradient(dx2, dy2, weight.data);
  else ops::gemm(dx2, dy2, linear_weight(weight, dy2.dtype()));  // dx = dy W
  if (!weight.frozen) {
    auto dw = [&weight, dy2, x2, fp8] {  // dW += dy^T x
      if (fp8) fp8_weight_gradient(weight.grad, dy2, x2);
      else ops::gemm(weight.grad, dy2, x2, {.trans_a = true, .beta = 1.0f});
    };
    const StepState& state = ctx.state();
    if (state.weight_gradients && !state.more_parts && dy2.numel() <= kDeferredGradientRatio * x2.numel())
      state.weight_gradients->products.push_back({&weight, std::move(dw)});
    else dw();
  }
  if (bias && !bias->frozen) ops::bias_grad(bias->grad, dy2);
}

Linear::Linear(std::int64_t in, std::int64_t out, bool bias, ParameterInit init)
    : in_(in), out_(out), weight_(&add_parameter("weight", {out, in}, init)),
      bias_(bias ? &add_parameter("bias", {out}, ParameterInit::zeros()) : nullptr) {}

Tensor Linear::forward(const Tensor& x, Context& ctx) {
  TIDAL_ASSERT(x.dim(-1) == in_, "{}: input {} for {} features", path(), x.str(), in_);
  Tensor y = ctx.empty(x.shape().with_last(out_), x.dtype());
  Tensor y2 = y.reshape({-1, out_});
  linear_forward(y2, x.reshape({-1, in_}), *weight_, bias_, ctx.state().fp8_linears);
  ctx.saved = {x};
  return y;
}

Tensor Linear::backward(const Tensor& dy, Context& ctx) {
  const Tensor& x = ctx.saved.at(0);
  Tensor x2 = x.reshape({-1, in_}), dy2 = dy.reshape({-1, out_});
  Tensor dx = ctx.empty(x.shape(), x.dtype());
  Tensor dx2 = dx.reshape({-1, in_});
  linear_backward(dx2, dy2, x2, *weight_, bias_, ctx, ctx.state().fp8_linears);
  ctx.saved.clear();
  return dx;
}

}  // namespace tidal::nn
