// Element types and the fp32 <-> bf16 / fp16 conversions every CPU kernel uses. bf16 and fp16
// are storage types: kernels load them into fp32, compute, and round back to nearest-even.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace tidal {

enum class DType : std::uint8_t { f32, bf16, f16, i32, u8 };  // u8: bytes (NF4's packed codes, ops/nf4.h)

std::size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // "f32", "bf16", "f16", "i32", "u8"

struct bf16 {
  std::uint16_t bits;
};
struct f16 {
  std::uint16_t bits;
};

inline float bits_to_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline std::uint32_t float_to_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float to_float(float v) { return v; }
inline float to_float(bf16 v) { return bits_to_float(std::uint32_t(v.bits) << 16); }
// Exact, and branch-free so that kernels reading fp16 vectorise: the exponent is rebiased; an
// all-ones exponent (inf, NaN) is rebiased once more; a subnormal is formed as 2^-14 * (1 + m)
// and 2^-14 subtracted in fp32, which is exact.
inline float f16_to_float(std::uint16_t h) {
  const std::uint32_t shifted = std::uint32_t(h & 0x7fffu) << 13;
  const std::uint32_t exp = shifted & 0x0f800000u;
  const std::uint32_t u = shifted + (112u << 23) + (exp == 0x0f800000u ? (112u << 23) : 0u);
  const float subnormal = bits_to_float(u + (1u << 23)) - bits_to_float(113u << 23);
  const float magnitude = exp == 0 ? subnormal : bits_to_float(u);
  return bits_to_float(float_to_bits(magnitude) | (std::uint32_t(h & 0x8000u) << 16));
}
inline float to_float(f16 v) { return f16_to_float(v.bits); }

inline bf16 to_bf16(float f) {
  std::uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{std::uint16_t((u >> 16) | 0x40)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return bf16{std::uint16_t(u >> 16)};
}
// Round to nearest even, branch-free so that kernels writing fp16 vectorise (an out-of-line call
// per element ran calibrate's elementwise ops at 0.3 GB/s, a tenth of bf16's): a normal result
// rebiases the exponent and rounds the 13 dropped bits; a subnormal one is |f| + 0.5f, whose
// fp32 ulp (2^-24) is fp16's subnormal spacing, so the FPU's own rounding gives its bits over
// 0.5f's; too large is infinity, NaN the quiet NaN.
inline std::uint16_t float_to_f16_bits(float f) {
  const std::uint32_t u = float_to_bits(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t abs = u & 0x7fffffffu;
  const std::uint32_t rebiased = abs - 0x38000000u;  // exponent 127 -> 15
  const std::uint32_t normal = (rebiased + 0xfffu + ((rebiased >> 13) & 1u)) >> 13;
  const std::uint32_t subnormal = float_to_bits(bits_to_float(abs) + 0.5f) - float_to_bits(0.5f);
  std::uint32_t h = abs < 0x38800000u ? subnormal : normal;  // below 2^-14, fp16's smallest normal
  h = abs >= 0x477ff000u ? 0x7c00u : h;                     // rounds to 65520 or more: infinity
  h = abs > 0x7f800000u ? 0x7e00u : h;                      // NaN
  return std::uint16_t(sign | h);
}
inline f16 to_f16(float f) { return f16{float_to_f16_bits(f)}; }

// Store an fp32 value into storage type T.
template <class T>
inline T from_float(float v);
template <>
inline float from_float<float>(float v) { return v; }
template <>
inline bf16 from_float<bf16>(float v) { return to_bf16(v); }
template <>
inline f16 from_float<f16>(float v) { return to_f16(v); }

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::f32; }
template <>
constexpr DType dtype_of<bf16>() { return DType::bf16; }
template <>
constexpr DType dtype_of<f16>() { return DType::f16; }
template <>
constexpr DType dtype_of<std::int32_t>() { return DType::i32; }
template <>
constexpr DType dtype_of<std::uint8_t>() { return DType::u8; }

}  // namespace tidal
