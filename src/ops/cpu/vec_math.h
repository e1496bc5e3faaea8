// exp and tanh as straight-line float code that the compiler vectorises inside `#pragma omp simd`
// loops (libm's expf / tanhf are scalar calls there: before these, GELU's tanh took 40% of the
// fp32 GPT step). Cody-Waite range reduction and a degree-6 polynomial (Cephes' expf
// coefficients): within 2 ulp of expf over the whole range.
#pragma once

#include <bit>
#include <cstdint>

namespace tidal::ops::cpu {

// e^x for x <= 88.7 (the callers' arguments are differences from a row's maximum, at most ~0):
// NaN for NaN, 0 for -inf and below -86.64 (2^n under 2^-125, results under 2.4e-38, flush to 0). One branch-free
// clamp: a second comparison makes GCC thread jumps, and the loop around it stops vectorising.
#pragma omp declare simd notinbranch
inline float exp_fast(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  const float xc = x < -88.0f ? -88.0f : x;
  // n = round(x log2 e): truncation of a positive value is floor (floorf would not vectorise)
  const float n = float(std::int32_t(xc * kLog2e + 200.5f)) - 200.0f;
  float r = xc - n * kLn2Hi;
  r = r - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // 2^n as 2^(n-1) * 2 (n reaches 128 at 88.7); a biased exponent below 1 flushes to 0
  std::int32_t biased = std::int32_t(n) + 126;
  biased = biased < 0 ? 0 : biased;
  return p * std::bit_cast<float>(std::uint32_t(biased) << 23) * 2.0f;
}

// tanh(x) = sign(x) (1 - e) / (1 + e), e = e^(-2|x|): absolute error under 2e-7.
#pragma omp declare simd notinbranch
inline float tanh_fast(float x) {
  const float e = exp_fast(-2.0f * __builtin_fabsf(x));
  return __builtin_copysignf((1.0f - e) / (1.0f + e), x);
}

// erf(x), Abramowitz & Stegun 7.1.26 on |x| with the sign restored: absolute error under 6e-7
// (the formula's 1.5e-7, fp32 rounding and exp_fast's).
#pragma omp declare simd notinbranch
inline float erf_fast(float x) {
  const float a = __builtin_fabsf(x);
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  const float poly = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  return __builtin_copysignf(1.0f - poly * exp_fast(-a * a), x);
}

}  // namespace tidal::ops::cpu
