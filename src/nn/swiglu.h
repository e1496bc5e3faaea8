// SwiGLU as a module (ops/swiglu.h): the fused [gate | up] features of an MLP's first linear ->
// silu(gate) * up. Under tensor parallelism each rank holds its block of gate and of up (the
// linear's two segments), so the product is local.
#pragma once

#include "nn/module.h"

namespace tidal::nn {

class SwiGlu final : public Module {
 public:
  Tensor forward(const Tensor& gate_up, Context& ctx) override;  // [..., 2I'] -> [..., I']
  Tensor backward(const Tensor& dy, Context& ctx) override;
};

}  // namespace tidal::nn
