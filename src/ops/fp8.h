// fp8 with one scale per tensor, taken from the tensor's largest magnitude each time it is cast
// (torchtitan's "tensorwise" recipe; Micikevicius et al. 2022, "FP8 Formats for Deep Learning"):
// e4m3 (OCP E4M3FN: bias 7, largest finite 448, no infinities) for weights and activations, e5m2
// (bias 15, largest finite 57344) for gradients. A tensor x goes to fp8 as q = fp8(x * scale) with
// scale = largest / max(amax(x), kFp8AmaxFloor), so its largest element lands on the format's
// largest finite value; a GEMM of two such tensors multiplies its fp32 sum by both 1 / scale.
//
// Rounding is to nearest, ties to even; a value past the largest finite one becomes that value
// (saturation, as CUDA's __NV_SATFINITE); NaN stays NaN (0x7F, with the sign bit). The CPU and
// the GPU give the same bytes for the same input (both scale in fp32, IEEE-rounded).
//
// Layouts: q u8 [rows, cols] for x seen as [rows, cols] (its last dimension the columns), or
// [cols, rows] with `transpose` (Hopper's fp8 GEMMs take both operands with the summed dimension
// contiguous, so a weight's or an activation's transpose is cast, not the tensor).
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

#include <cstdint>

namespace tidal::ops {

enum class Fp8Format : std::uint8_t { e4m3, e5m2 };

// The largest finite value of the format.
constexpr float fp8_largest(Fp8Format f) { return f == Fp8Format::e4m3 ? 448.0f : 57344.0f; }
// amax below this counts as this (an all-zero tensor gets a finite scale; torchao's floor).
inline constexpr float kFp8AmaxFloor = 1e-12f;
// The scale that takes a tensor of largest magnitude `amax` onto the format's range (fp32; NaN
// when amax is NaN).
constexpr float fp8_scale(float amax, Fp8Format f) {
  return fp8_largest(f) / (amax > kFp8AmaxFloor ? amax : (amax == amax ? kFp8AmaxFloor : amax));
}

// One value to fp8 and back (host code: the CPU backend and the tests' references).
std::uint8_t to_fp8(float v, Fp8Format f);
float from_fp8(std::uint8_t code, Fp8Format f);

namespace cpu {
void fp8_quantize(Tensor& q, Tensor& scale_inv, const Tensor& x, Fp8Format format, bool transpose);
void gemm_fp8(Tensor& c, const Tensor& a, const Tensor& a_scale_inv, Fp8Format a_format, const Tensor& b,
              const Tensor& b_scale_inv, Fp8Format b_format, float beta);
}  // namespace cpu
namespace meta {
void fp8_quantize(Tensor& q, Tensor& scale_inv, const Tensor& x, Fp8Format format, bool transpose);
void gemm_fp8(Tensor& c, const Tensor& a, const Tensor& a_scale_inv, Fp8Format a_format, const Tensor& b,
              const Tensor& b_scale_inv, Fp8Format b_format, float beta);
}  // namespace meta
#if TIDAL_CUDA
namespace cuda {
void fp8_quantize(Tensor& q, Tensor& scale_inv, const Tensor& x, Fp8Format format, bool transpose);
void gemm_fp8(Tensor& c, const Tensor& a, const Tensor& a_scale_inv, Fp8Format a_format, const Tensor& b,
              const Tensor& b_scale_inv, Fp8Format b_format, float beta);
}  // namespace cuda
#endif

// x [.., cols] f32 / bf16 seen as [rows, cols] -> q u8 [rows, cols] ([cols, rows] when
// `transpose`) and scale_inv f32 [1] = 1 / fp8_scale(amax(x)), on x's device, no host sync.
inline void fp8_quantize(Tensor& q, Tensor& scale_inv, const Tensor& x, Fp8Format format, bool transpose) {
  TIDAL_OPS_DISPATCH(x, fp8_quantize, q, scale_inv, x, format, transpose);
}
// c [m, n] (f32 / bf16) = (a [m, k] . b [n, k]^T) * a_scale_inv * b_scale_inv + beta c: two fp8
// tensors with the summed dimension k contiguous in both, their products summed in fp32 (on the
// CPU: in double, rounded once). m, n, k multiples of 16 on the GPU (cuBLASLt's fp8 kernels).
inline void gemm_fp8(Tensor& c, const Tensor& a, const Tensor& a_scale_inv, Fp8Format a_format, const Tensor& b,
                     const Tensor& b_scale_inv, Fp8Format b_format, float beta = 0.0f) {
  TIDAL_OPS_DISPATCH(a, gemm_fp8, c, a, a_scale_inv, a_format, b, b_scale_inv, b_format, beta);
}

// The shapes, checked for every backend: rows and cols of x, and m, n, k of the GEMM.
struct Fp8QuantizeDims {
  std::int64_t rows, cols;
};
Fp8QuantizeDims fp8_quantize_dims(const Tensor& q, const Tensor& scale_inv, const Tensor& x, bool transpose);
struct Fp8GemmDims {
  std::int64_t m, n, k;
};
Fp8GemmDims fp8_gemm_dims(const Tensor& c, const Tensor& a, const Tensor& a_scale_inv, const Tensor& b,
                          const Tensor& b_scale_inv);

}  // namespace tidal::ops
