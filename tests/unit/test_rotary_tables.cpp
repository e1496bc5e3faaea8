// The rotary embeddings' host functions (ops/rotary.h): inverse frequencies, with and without
// Llama 3's scaling, against values computed in Python, and the cos/sin tables' position offset.
#include "core/error.h"
#include "ops/rotary.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace tidal {
namespace {

// Llama 3.1 8B: head dim 128, theta 500000, rope_scaling {factor 8, low_freq_factor 1,
// high_freq_factor 4, original_max_position_embeddings 8192}.
constexpr std::int64_t kHeadDim = 128;
constexpr double kTheta = 500000.0;
constexpr ops::RopeScaling kLlama31{.factor = 8.0f, .low_freq_factor = 1.0f, .high_freq_factor = 4.0f,
                                    .original_max_positions = 8192};

TEST(RotaryFrequencies, UnscaledMatchTorchBitForBit) {
  // 1.0 / (500000.0 ** (torch.arange(0, 128, 2, dtype=torch.int64).float() / 128)), torch 1.13:
  // printed with "%.9g", which round-trips fp32.
  const std::vector<float> f = ops::rotary_inverse_frequencies(kHeadDim, kTheta);
  ASSERT_EQ(f.size(), 64u);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], 0.814617217f);
  EXPECT_EQ(f[17], 0.0306345206f);
  EXPECT_EQ(f[33], 0.00115204265f);
  EXPECT_EQ(f[63], 2.4551407e-06f);
}

TEST(RotaryFrequencies, Llama3ScalingMatchesTransformersRule) {
  // Expected: transformers' _compute_llama3_parameters (modeling_rope_utils.py, 4.43+) re-stated
  // in Python in double from torch's fp32 frequencies above and rounded to fp32:
  //   wavelen = 2 pi / f; wavelen < 8192/4: f; wavelen > 8192/1: f / 8;
  //   else s = (8192 / wavelen - 1) / (4 - 1), (1 - s) f / 8 + s f.
  // (torch's own fp32 evaluation differs from these by at most one ulp here, in the blend band.)
  const std::vector<float> f = ops::rotary_inverse_frequencies(kHeadDim, kTheta, kLlama31);
  ASSERT_EQ(f.size(), 64u);
  // High frequencies (wavelength under 2048 positions): kept.
  EXPECT_EQ(f[1], 0.814617217f);
  EXPECT_EQ(f[28], 0.00321144611f);
  // The blend band, i = 29..34 (wavelength 2402 .. 6695).
  EXPECT_FLOAT_EQ(f[29], 0.0021665704f);
  EXPECT_FLOAT_EQ(f[31], 0.00085675146f);
  EXPECT_FLOAT_EQ(f[33], 0.000312693679f);
  EXPECT_FLOAT_EQ(f[34], 0.000178507806f);
  // Low frequencies (wavelength over 8192): divided by the factor.
  EXPECT_FLOAT_EQ(f[35], 9.55621217e-05f);
  EXPECT_FLOAT_EQ(f[63], 3.06892588e-07f);
}

TEST(RotaryFrequencies, RejectsBadArguments) {
  EXPECT_THROW(ops::rotary_inverse_frequencies(15, kTheta), Error);
  EXPECT_THROW(ops::rotary_inverse_frequencies(0, kTheta), Error);
  EXPECT_THROW(ops::rotary_inverse_frequencies(16, 1.0), Error);
  ops::RopeScaling inverted = kLlama31;
  inverted.high_freq_factor = 0.5f;
  EXPECT_THROW(ops::rotary_inverse_frequencies(16, kTheta, inverted), Error);
  ops::RopeScaling shrinking = kLlama31;
  shrinking.factor = 0.5f;
  EXPECT_THROW(ops::rotary_inverse_frequencies(16, kTheta, shrinking), Error);
}

TEST(RotaryTables, AnglesAreFp32ProductsOfThePosition) {
  const std::vector<float> inv_freq{1.0f, 0.1f, 1e-3f};
  Tensor cos = Tensor::empty({4, 3}), sin = Tensor::empty({4, 3});
  ops::rotary_tables(cos, sin, inv_freq, 0);
  // Position 0: no rotation, exactly.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(cos.data<float>()[i], 1.0f);
    EXPECT_EQ(sin.data<float>()[i], 0.0f);
  }
  // Position 3, frequency 0.1f: the angle is the fp32 product 3 * 0.1f (0.300000012, not 0.3),
  // whose cos and sin are correctly rounded.
  EXPECT_EQ(cos.data<float>()[3 * 3 + 1], float(std::cos(double(3.0f * 0.1f))));
  EXPECT_EQ(sin.data<float>()[3 * 3 + 1], float(std::sin(double(3.0f * 0.1f))));
  EXPECT_NEAR(cos.data<float>()[3 * 3 + 0], std::cos(3.0), 1e-7);
  EXPECT_NEAR(sin.data<float>()[3 * 3 + 0], std::sin(3.0), 1e-7);
}

// A rank of a sequence ring holds positions [first, first + T): its tables are the rows of the
// whole sequence's tables from `first` on, bit for bit.
TEST(RotaryTables, OffsetTablesAreRowsOfTheFullTables) {
  const std::vector<float> inv_freq = ops::rotary_inverse_frequencies(24, kTheta, kLlama31);
  const std::int64_t half = 12, total = 50, first = 37, T = 13;
  Tensor cos = Tensor::empty({total, half}), sin = Tensor::empty({total, half});
  ops::rotary_tables(cos, sin, inv_freq, 0);
  Tensor cos_part = Tensor::empty({T, half}), sin_part = Tensor::empty({T, half});
  ops::rotary_tables(cos_part, sin_part, inv_freq, first);
  EXPECT_EQ(std::memcmp(cos_part.data<float>(), cos.data<float>() + first * half, cos_part.nbytes()), 0);
  EXPECT_EQ(std::memcmp(sin_part.data<float>(), sin.data<float>() + first * half, sin_part.nbytes()), 0);
}

}  // namespace
}  // namespace tidal
