#include "ops/fp8.h"

#include <cmath>

namespace tidal::ops {
namespace {

struct Fp8Bits {
  int mantissa_bits, bias;
  std::uint8_t largest;  // the largest finite value's code (positive)
};
constexpr Fp8Bits bits_of(Fp8Format f) {
  return f == Fp8Format::e4m3 ? Fp8Bits{3, 7, 0x7E} : Fp8Bits{2, 15, 0x7B};
}
constexpr std::uint8_t kNaN = 0x7F;  // both formats (E4M3FN's only NaN; one of E5M2's)

}  // namespace

std::uint8_t to_fp8(float v, Fp8Format f) {
  const Fp8Bits b = bits_of(f);
  const std::uint8_t sign = std::signbit(v) ? 0x80 : 0x00;
  if (std::isnan(v)) return sign | kNaN;
  const float a = std::fabs(v);
  if (a >= fp8_largest(f)) return sign | b.largest;
  if (a == 0.0f) return sign;
  // The spacing of representable values around a: 2^(e - M) for a normal a of exponent e, and
  // the subnormals' 2^(1 - bias - M) below 2^(1 - bias). a / spacing is exact (a power of 2).
  int e = 0;
  std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1): a's exponent is e - 1
  const int exponent = std::max(e - 1, 1 - b.bias);
  const float spacing = std::ldexp(1.0f, exponent - b.mantissa_bits);
  const float units = std::nearbyint(a / spacing);  // ties to even (the default rounding mode)
  const float q = units * spacing;
  if (q >= fp8_largest(f)) return sign | b.largest;
  if (q == 0.0f) return sign;
  int qe = 0;
  std::frexp(q, &qe);
  const int biased = std::max(qe - 1 + b.bias, 0);  // 0: subnormal
  const float mantissa_unit = std::ldexp(1.0f, (biased == 0 ? 1 - b.bias : qe - 1) - b.mantissa_bits);
  const int mantissa = int(q / mantissa_unit) - (biased == 0 ? 0 : 1 << b.mantissa_bits);
  return std::uint8_t(sign | (biased << b.mantissa_bits) | mantissa);
}

float from_fp8(std::uint8_t code, Fp8Format f) {
  const Fp8Bits b = bits_of(f);
  const float sign = code & 0x80 ? -1.0f : 1.0f;
  const int biased = (code & 0x7F) >> b.mantissa_bits, mantissa = code & ((1 << b.mantissa_bits) - 1);
  const int top = (1 << (7 - b.mantissa_bits)) - 1;  // the all-ones exponent
  if (f == Fp8Format::e4m3 && biased == top && mantissa == (1 << b.mantissa_bits) - 1) return std::nanf("");
  if (f == Fp8Format::e5m2 && biased == top) return mantissa == 0 ? sign * INFINITY : std::nanf("");
  if (biased == 0) return sign * std::ldexp(float(mantissa), 1 - b.bias - b.mantissa_bits);
  return sign * std::ldexp(float((1 << b.mantissa_bits) + mantissa), biased - b.bias - b.mantissa_bits);
}

Fp8QuantizeDims fp8_quantize_dims(const Tensor& q, const Tensor& scale_inv, const Tensor& x, bool transpose) {
  TIDAL_ASSERT(x.dtype() == DType::f32 || x.dtype() == DType::bf16, "fp8_quantize takes f32 or bf16, got {}",
               x.str());
  const std::int64_t cols = x.ndim() == 0 ? 1 : x.dim(-1), rows = cols == 0 ? 0 : x.numel() / cols;
  TIDAL_ASSERT(q.dtype() == DType::u8 && q.ndim() == 2 &&
                   q.shape() == (transpose ? Shape({cols, rows}) : Shape({rows, cols})),
               "fp8_quantize q {} for x {}{}", q.str(), x.str(), transpose ? " transposed" : "");
  TIDAL_ASSERT(scale_inv.dtype() == DType::f32 && scale_inv.numel() == 1, "fp8_quantize scale_inv {}",
               scale_inv.str());
  return {rows, cols};
}

Fp8GemmDims fp8_gemm_dims(const Tensor& c, const Tensor& a, const Tensor& a_scale_inv, const Tensor& b,
                          const Tensor& b_scale_inv) {
  TIDAL_ASSERT(a.dtype() == DType::u8 && b.dtype() == DType::u8 && a.ndim() == 2 && b.ndim() == 2 &&
                   a.dim(1) == b.dim(1),
               "gemm_fp8 a {} b {}: [m, k] and [n, k] fp8 codes", a.str(), b.str());
  TIDAL_ASSERT((c.dtype() == DType::f32 || c.dtype() == DType::bf16) && c.shape() == Shape({a.dim(0), b.dim(0)}),
               "gemm_fp8 c {} for a {} b {}", c.str(), a.str(), b.str());
  TIDAL_ASSERT(a_scale_inv.dtype() == DType::f32 && a_scale_inv.numel() == 1 &&
                   b_scale_inv.dtype() == DType::f32 && b_scale_inv.numel() == 1,
               "gemm_fp8 scales {} {}", a_scale_inv.str(), b_scale_inv.str());
  return {a.dim(0), b.dim(0), a.dim(1)};
}

}  // namespace tidal::ops
