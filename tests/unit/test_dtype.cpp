// fp32 <-> bf16 / fp16 conversions against closed-form bit patterns.
#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace tidal {

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(to_bf16(1.0f).bits, 0x3f80);
  EXPECT_EQ(to_bf16(-2.0f).bits, 0xc000);
  // 1 + 2^-8 is exactly between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(to_bf16(1.0f + std::ldexp(1.0f, -8)).bits, 0x3f80);
  // 1 + 3 * 2^-8 is between 1 + 2^-7 (odd) and 1 + 2^-6: ties to even (up).
  EXPECT_EQ(to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)).bits, 0x3f82);
  EXPECT_TRUE(std::isnan(to_float(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(to_float(bf16{0x4049}), 3.140625f);
}

TEST(DType, F16KnownValues) {
  EXPECT_EQ(to_f16(1.0f).bits, 0x3c00);
  EXPECT_EQ(to_f16(-2.5f).bits, 0xc100);
  EXPECT_EQ(to_f16(65504.0f).bits, 0x7bff);                      // largest finite
  EXPECT_EQ(to_f16(65520.0f).bits, 0x7c00);                      // rounds to infinity
  EXPECT_EQ(to_f16(std::ldexp(1.0f, -24)).bits, 0x0001);         // smallest subnormal
  EXPECT_EQ(to_f16(std::ldexp(1.0f, -25)).bits, 0x0000);         // half of it: ties to even (0)
  EXPECT_EQ(to_f16(std::ldexp(3.0f, -26)).bits, 0x0001);         // above half: rounds up
  EXPECT_EQ(to_f16(std::ldexp(1.0f, -14)).bits, 0x0400);         // smallest normal
  EXPECT_EQ(to_f16(1.0f + std::ldexp(1.0f, -11)).bits, 0x3c00);  // tie to even
}

TEST(DType, F16RoundTripsEveryFiniteValue) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00) continue;  // inf / NaN
    const float f = f16_to_float(std::uint16_t(h));
    ASSERT_EQ(float_to_f16_bits(f), h) << "bits " << h;
  }
}

// The branch-free encoder against the compiler's own fp32 -> _Float16 conversion (round to
// nearest even; F16C's instruction or libgcc), on every 251st fp32 bit pattern of both signs:
// normals, subnormals, overflow, infinities. A NaN only has to stay a NaN (the payloads differ).
TEST(DType, F16EncodesLikeTheCompilersFloat16) {
  for (std::uint64_t i = 0; i <= 0xffffffffu; i += 251) {
    const float f = bits_to_float(std::uint32_t(i));
    const _Float16 expected = static_cast<_Float16>(f);
    std::uint16_t want = 0;
    std::memcpy(&want, &expected, 2);
    const std::uint16_t got = float_to_f16_bits(f);
    if (f != f) {
      ASSERT_EQ(got & 0x7c00u, 0x7c00u) << "fp32 bits " << i;
      ASSERT_NE(got & 0x3ffu, 0u) << "fp32 bits " << i;
      continue;
    }
    ASSERT_EQ(got, want) << "fp32 bits " << i;
  }
}

// The branch-free decoder against the definition, on all 65536 bit patterns.
TEST(DType, F16DecodesEveryBitPatternByTheDefinition) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const std::uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
    const std::uint32_t sign = (h & 0x8000u) << 16;
    const float f = f16_to_float(std::uint16_t(h));
    if (e == 0x1f) {  // inf / NaN: all-ones exponent, payload kept
      ASSERT_EQ(float_to_bits(f), sign | 0x7f800000u | (m << 13)) << "bits " << h;
      continue;
    }
    const float magnitude = e == 0 ? std::ldexp(float(m), -24) : std::ldexp(1.0f + float(m) / 1024.0f, int(e) - 15);
    ASSERT_EQ(float_to_bits(f), float_to_bits(magnitude) | sign) << "bits " << h;
  }
}

TEST(DType, Sizes) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(dtype_size(DType::i32), 4u);
}

}  // namespace tidal
