// fp8 (ops/fp8.h) on the CPU: every code of both formats decodes to its value and encodes back;
// encoding picks the nearest representable value, ties to the even code, saturating past the
// largest (against a search over all 256 codes); the tensorwise cast's scale and layouts; and a
// GEMM of two cast tensors whose scales are powers of two, exact against the integer product.
#include "ops/fp8.h"
#include "support/random.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <random>

namespace tidal {
namespace {

using ops::Fp8Format;

constexpr Fp8Format kFormats[] = {Fp8Format::e4m3, Fp8Format::e5m2};

TEST(Fp8, KnownCodes) {
  EXPECT_EQ(ops::to_fp8(1.0f, Fp8Format::e4m3), 0x38);
  EXPECT_EQ(ops::to_fp8(1.0f, Fp8Format::e5m2), 0x3C);
  EXPECT_EQ(ops::to_fp8(448.0f, Fp8Format::e4m3), 0x7E);
  EXPECT_EQ(ops::to_fp8(-448.0f, Fp8Format::e4m3), 0xFE);
  EXPECT_EQ(ops::to_fp8(57344.0f, Fp8Format::e5m2), 0x7B);
  EXPECT_EQ(ops::to_fp8(std::ldexp(1.0f, -9), Fp8Format::e4m3), 0x01) << "e4m3's smallest subnormal";
  EXPECT_EQ(ops::to_fp8(std::ldexp(1.0f, -16), Fp8Format::e5m2), 0x01) << "e5m2's smallest subnormal";
  EXPECT_EQ(ops::to_fp8(1.0625f, Fp8Format::e4m3), 0x38) << "halfway between 1 and 1.125: the even code";
  EXPECT_EQ(ops::to_fp8(1.1875f, Fp8Format::e4m3), 0x3A) << "halfway between 1.125 and 1.25: the even code";
  EXPECT_EQ(ops::to_fp8(1e6f, Fp8Format::e4m3), 0x7E) << "saturates";
  EXPECT_EQ(ops::to_fp8(-INFINITY, Fp8Format::e5m2), 0xFB) << "saturates";
  EXPECT_EQ(ops::to_fp8(std::nanf(""), Fp8Format::e4m3) & 0x7F, 0x7F);
  EXPECT_TRUE(std::isnan(ops::from_fp8(0x7F, Fp8Format::e4m3)));
  EXPECT_TRUE(std::isinf(ops::from_fp8(0x7C, Fp8Format::e5m2)));
}

TEST(Fp8, EveryFiniteCodeRoundTrips) {
  for (const Fp8Format f : kFormats)
    for (int code = 0; code < 256; ++code) {
      const float v = ops::from_fp8(std::uint8_t(code), f);
      if (!std::isfinite(v)) continue;
      EXPECT_EQ(ops::to_fp8(v, f), code == 0x80 ? 0x80 : code) << "code " << code << " value " << v;
    }
}

// The nearest finite code to v by searching them all; ties to the even code (its lowest bit 0).
std::uint8_t nearest_code(float v, Fp8Format f) {
  int best = -1;
  double best_distance = std::numeric_limits<double>::infinity();
  for (int code = 0; code < 256; ++code) {
    const float c = ops::from_fp8(std::uint8_t(code), f);
    if (!std::isfinite(c) || std::signbit(c) != std::signbit(v)) continue;
    const double distance = std::fabs(double(c) - double(v));
    if (distance < best_distance || (distance == best_distance && (code & 1) == 0)) {
      best = code;
      best_distance = distance;
    }
  }
  return std::uint8_t(best);
}

TEST(Fp8, EncodingIsTheNearestCodeTiesToEven) {
  std::mt19937 rng(8);
  for (const Fp8Format f : kFormats) {
    const float largest = ops::fp8_largest(f);
    std::uniform_real_distribution<float> exponent(-20.0f, std::log2(largest) + 0.5f);
    for (int i = 0; i < 20000; ++i) {
      const float v = (i % 2 ? -1.0f : 1.0f) * std::exp2(exponent(rng));
      const std::uint8_t want = std::fabs(v) >= largest ? std::uint8_t((v < 0 ? 0x80 : 0) | (f == Fp8Format::e4m3 ? 0x7E : 0x7B))
                                                        : nearest_code(v, f);
      ASSERT_EQ(ops::to_fp8(v, f), want) << v;
    }
    // Every midpoint between neighbouring codes: the even one.
    for (int code = 0; code < 0x7E; ++code) {
      const float lo = ops::from_fp8(std::uint8_t(code), f), hi = ops::from_fp8(std::uint8_t(code + 1), f);
      if (!std::isfinite(hi)) break;
      ASSERT_EQ(ops::to_fp8((lo + hi) / 2, f), code % 2 == 0 ? code : code + 1) << lo << " .. " << hi;
    }
  }
}

TEST(Fp8, QuantizeScalesByTheLargestMagnitude) {
  // amax 2: scale 224 for e4m3, every element x -> fp8(224 x).
  Tensor x = Tensor::empty({2, 3});
  const float entries[] = {0.5f, -2.0f, 0.0f, 1.0f, 0.01f, -0.3f};
  std::copy(std::begin(entries), std::end(entries), x.data<float>());
  for (const bool transpose : {false, true}) {
    Tensor q = Tensor::empty(transpose ? Shape({3, 2}) : Shape({2, 3}), DType::u8), scale_inv = Tensor::empty({1});
    ops::fp8_quantize(q, scale_inv, x, Fp8Format::e4m3, transpose);
    EXPECT_EQ(scale_inv.data<float>()[0], 1.0f / 224.0f);
    for (std::int64_t r = 0; r < 2; ++r)
      for (std::int64_t c = 0; c < 3; ++c)
        EXPECT_EQ(q.data<std::uint8_t>()[transpose ? c * 2 + r : r * 3 + c],
                  ops::to_fp8(x.data<float>()[r * 3 + c] * 224.0f, Fp8Format::e4m3));
  }
  Tensor q = Tensor::empty({2, 2}, DType::u8), scale_inv = Tensor::empty({1});
  ops::fp8_quantize(q, scale_inv, Tensor::zeros({2, 2}), Fp8Format::e5m2, false);
  EXPECT_EQ(scale_inv.data<float>()[0], ops::kFp8AmaxFloor / 57344.0f) << "all zeros: the floor's scale";
  EXPECT_EQ(q.data<std::uint8_t>()[3], 0);
}

TEST(Fp8, BfloatInputsCastLikeTheirFloatValues) {
  const Tensor x = testing::randn({5, 7}, 3);
  Tensor xb = Tensor::empty({5, 7}, DType::bf16);
  for (std::int64_t i = 0; i < 35; ++i) xb.data<bf16>()[i] = to_bf16(x.data<float>()[i]);
  Tensor xf = Tensor::empty({5, 7});
  for (std::int64_t i = 0; i < 35; ++i) xf.data<float>()[i] = to_float(xb.data<bf16>()[i]);
  Tensor qb = Tensor::empty({5, 7}, DType::u8), qf = Tensor::empty({5, 7}, DType::u8);
  Tensor sb = Tensor::empty({1}), sf = Tensor::empty({1});
  ops::fp8_quantize(qb, sb, xb, Fp8Format::e5m2, false);
  ops::fp8_quantize(qf, sf, xf, Fp8Format::e5m2, false);
  EXPECT_EQ(sb.data<float>()[0], sf.data<float>()[0]);
  for (std::int64_t i = 0; i < 35; ++i) EXPECT_EQ(qb.data<std::uint8_t>()[i], qf.data<std::uint8_t>()[i]) << i;
}

// Entries from {0, ±0.25, ±0.5, ±1, ±1.75} with 1.75 present: e4m3's scale is 448 / 1.75 = 256, a
// power of two, so every entry is exact in fp8 and the GEMM gives a . b^T exactly.
TEST(Fp8, GemmOfExactlyRepresentedTensorsIsExact) {
  const float values[] = {0.0f, 0.25f, -0.25f, 0.5f, -0.5f, 1.0f, -1.0f, 1.75f, -1.75f};
  std::mt19937 rng(9);
  const std::int64_t m = 5, n = 3, k = 6;
  auto fill = [&](std::int64_t rows) {
    Tensor t = Tensor::empty({rows, k});
    for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = values[rng() % 9];
    t.data<float>()[0] = 1.75f;
    return t;
  };
  const Tensor a = fill(m), b = fill(n);
  Tensor qa = Tensor::empty({m, k}, DType::u8), qb = Tensor::empty({n, k}, DType::u8);
  Tensor sa = Tensor::empty({1}), sb = Tensor::empty({1});
  ops::fp8_quantize(qa, sa, a, Fp8Format::e4m3, false);
  ops::fp8_quantize(qb, sb, b, Fp8Format::e5m2, false);  // e5m2: 57344 / 1.75 = 32768, a power of two too
  Tensor c = Tensor::empty({m, n});
  ops::gemm_fp8(c, qa, sa, Fp8Format::e4m3, qb, sb, Fp8Format::e5m2);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double want = 0;
      for (std::int64_t p = 0; p < k; ++p) want += double(a.data<float>()[i * k + p]) * b.data<float>()[j * k + p];
      EXPECT_EQ(c.data<float>()[i * n + j], float(want)) << i << "," << j;
    }
}

}  // namespace
}  // namespace tidal
