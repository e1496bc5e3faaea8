// Linear: y = x W^T + b over the last dimension (PyTorch's layout, W: [out, in]).
#pragma once

#include "nn/module.h"

namespace tidal::nn {

// The weight's values for a product in `dtype`: its data, or an NF4 weight (Parameter::nf4)
// dequantized whole into memory of its own, for this product only (QLoRA's "dequantize, then
// multiply in the compute dtype"; the grid's and the cube's SUMMA products, which send the block).
Tensor linear_weight(const Parameter& weight, DType dtype);

// The matrix products of a linear layer on 2-D views, shared by Linear and the tensor-parallel
// linears: y2 [N, out] = x2 [N, in] W^T (+ b); and dx2 = dy2 W, dW += dy2^T x2 (db += column sums),
// dW left for the W pass under a zero-bubble schedule's B (StepState::weight_gradients). An NF4
// weight of more than 4 Mi elements is dequantized a tile at a time, each tile's product written
// into its columns of y2 (its rows of W) or dx2 (its columns of W): a step holds one tile of it.
// `fp8`: the products in fp8 where nn/fp8_linear.h's fp8_applies (train.precision = "fp8").
void linear_forward(Tensor& y2, const Tensor& x2, const Parameter& weight, const Parameter* bias, bool fp8);
void linear_backward(Tensor& dx2, const Tensor& dy2, const Tensor& x2, Parameter& weight, Parameter* bias,
                     const Context& ctx, bool fp8);

class Linear final : public Module {
 public:
  Linear(std::int64_t in, std::int64_t out, bool bias, ParameterInit init);

  Tensor forward(const Tensor& x, Context& ctx) override;  // x [..., in] -> [..., out]
  Tensor backward(const Tensor& dy, Context& ctx) override;

  Parameter& weight() { return *weight_; }

 private:
  std::int64_t in_, out_;
  Parameter* weight_;  // [out, in]
  Parameter* bias_;    // [out] or null
};

}  // namespace tidal::nn
