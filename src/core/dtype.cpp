#include "core/dtype.h"

#include "core/error.h"

namespace tidal {

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i32: return 4;
  }
  TIDAL_ASSERT(false, "unknown dtype {}", int(t));
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
  }
  TIDAL_ASSERT(false, "unknown dtype {}", int(t));
}

std::uint16_t float_to_f16_bits(float f) {
  const std::uint32_t u = float_to_bits(f);
  const std::uint16_t sign = std::uint16_t((u >> 16) & 0x8000u);
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return std::uint16_t(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return std::uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero): shift the implicit-one mantissa right, round to nearest even.
    if (abs < 0x33000000u) return sign;  // below half the smallest subnormal
    const std::uint32_t exp = abs >> 23;
    const std::uint32_t man = (abs & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126 - exp;  // 14..24
    std::uint32_t half = man >> shift;
    const std::uint32_t rem = man & ((1u << shift) - 1);
    const std::uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return std::uint16_t(sign | half);
  }
  std::uint32_t v = abs - 0x38000000u;  // rebias exponent 127 -> 15
  v += 0xfffu + ((v >> 13) & 1u);       // round to nearest even on the 13 dropped bits
  return std::uint16_t(sign | (v >> 13));
}

}  // namespace tidal
