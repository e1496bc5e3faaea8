// A linear layer's three products in fp8 (train.precision = "fp8"; ops/fp8.h's tensorwise recipe,
// as torchtitan's Float8Linear): forward y = x W^T with x and W in e4m3, backward dx = dy W and
// dW += dy^T x with dy in e5m2, each operand cast afresh with its own scale (the weight and the
// input twice: once as stored, once transposed, since the GPU's fp8 products take the summed
// dimension contiguous). Everything around them (bias, norms, attention, the loss) stays bf16, the
// master weights fp32.
#pragma once

#include "core/tensor.h"
#include "nn/module.h"

namespace tidal::nn {

// Whether the products of x2 [N, in] with weight [out, in] run in fp8: a dense (not NF4) weight,
// on a GPU, N, in and out multiples of 16 (cuBLASLt's fp8 kernels); elsewhere they stay bf16.
bool fp8_applies(const Tensor& x2, const Parameter& weight);

// y2 [N, out] = x2 [N, in] w^T
void fp8_forward(Tensor& y2, const Tensor& x2, const Tensor& w);
// dx2 [N, in] = dy2 [N, out] w
void fp8_input_gradient(Tensor& dx2, const Tensor& dy2, const Tensor& w);
// dw [out, in] += dy2^T x2
void fp8_weight_gradient(Tensor& dw, const Tensor& dy2, const Tensor& x2);

}  // namespace tidal::nn
