#include "nn/fp8_linear.h"

#include "core/gpu.h"
#include "ops/fp8.h"

namespace tidal::nn {
namespace {

using ops::Fp8Format;

// t [rows, cols] cast to fp8 (transposed: [cols, rows]) with its scale, in t's device's memory.
struct Fp8Operand {
  Tensor codes, scale_inv;
};
Fp8Operand cast(const Tensor& t, Fp8Format format, bool transpose) {
  Allocator& memory = allocator_on(t.device());
  const std::int64_t rows = t.dim(0), cols = t.dim(1);
  Fp8Operand o{Tensor::empty(transpose ? Shape({cols, rows}) : Shape({rows, cols}), DType::u8, memory),
               Tensor::empty({1}, DType::f32, memory)};
  ops::fp8_quantize(o.codes, o.scale_inv, t, format, transpose);
  return o;
}

void product(Tensor& c, const Fp8Operand& a, Fp8Format a_format, const Fp8Operand& b, Fp8Format b_format,
             float beta = 0.0f) {
  ops::gemm_fp8(c, a.codes, a.scale_inv, a_format, b.codes, b.scale_inv, b_format, beta);
}

}  // namespace

bool fp8_applies(const Tensor& x2, const Parameter& weight) {
  return !weight.nf4 && x2.device().is_cuda() && x2.dim(0) % 16 == 0 && weight.shape.numel() > 0 &&
         weight.shape[0] % 16 == 0 && weight.shape[1] % 16 == 0;
}

void fp8_forward(Tensor& y2, const Tensor& x2, const Tensor& w) {
  product(y2, cast(x2, Fp8Format::e4m3, false), Fp8Format::e4m3, cast(w, Fp8Format::e4m3, false), Fp8Format::e4m3);
}

void fp8_input_gradient(Tensor& dx2, const Tensor& dy2, const Tensor& w) {
  product(dx2, cast(dy2, Fp8Format::e5m2, false), Fp8Format::e5m2, cast(w, Fp8Format::e4m3, true), Fp8Format::e4m3);
}

void fp8_weight_gradient(Tensor& dw, const Tensor& dy2, const Tensor& x2) {
  product(dw, cast(dy2, Fp8Format::e5m2, true), Fp8Format::e5m2, cast(x2, Fp8Format::e4m3, true), Fp8Format::e4m3,
          1.0f);
}

}  // namespace tidal::nn
