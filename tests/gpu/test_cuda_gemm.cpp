// GEMM (cuBLASLt) and cast on the GPU against the CPU backend on the same inputs: every transpose
// pair, 2-d and batched, odd shapes, alpha != 1, beta 0 (c filled with NaN to prove it is not
// read) and 1 (accumulation), f32 / bf16 / f16 / mixed operands, TF32, unaligned views, k = 0,
// run-to-run bitwise determinism; casts between every pair of float types, bit for bit.
#include "ops/bias.h"
#include "ops/cast.h"
#include "ops/gemm.h"
#include "support/gpu.h"
#include "support/random.h"
#include "support/tolerance.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <utility>
#include <string>
#include <vector>

namespace tidal {
namespace {

using testing::all_close;
using testing::randn;
using testing::randn_as;
using testing::to_gpu;
using testing::to_host;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

Tensor as_dtype(const Tensor& f32, DType dtype) {
  if (dtype == DType::f32) return f32;
  Tensor t = Tensor::empty(f32.shape(), dtype);
  ops::cast(t, f32);
  return t;
}


Tensor as_f32(const Tensor& host) {
  if (host.dtype() == DType::f32) return host;
  Tensor t = Tensor::empty(host.shape());
  ops::cast(t, host);
  return t;
}

Tensor nan_on_gpu(const Shape& shape, DType dtype) { return to_gpu(as_dtype(Tensor::full(shape, kNaN), dtype)); }

// Every element's bits equal (a NaN matching any NaN when `nan_equal`: NaN payloads may differ).
::testing::AssertionResult same_bits(const Tensor& got, const Tensor& ref, bool nan_equal) {
  const Tensor g = got.device().is_cuda() ? to_host(got) : got, r = ref.device().is_cuda() ? to_host(ref) : ref;
  if (g.shape() != r.shape() || g.dtype() != r.dtype())
    return ::testing::AssertionFailure() << g.str() << " vs " << r.str();
  const std::size_t width = dtype_size(g.dtype());
  const auto* pg = static_cast<const unsigned char*>(g.raw());
  const auto* pr = static_cast<const unsigned char*>(r.raw());
  const Tensor gf = as_f32(g), rf = as_f32(r);
  for (std::int64_t i = 0; i < g.numel(); ++i) {
    if (std::memcmp(pg + i * width, pr + i * width, width) == 0) continue;
    const float vg = gf.data<float>()[i], vr = rf.data<float>()[i];
    if (nan_equal && std::isnan(vg) && std::isnan(vr)) continue;
    return ::testing::AssertionFailure() << "element " << i << " of " << g.str() << ": got " << vg << ", reference "
                                         << vr << " (bits differ)";
  }
  return ::testing::AssertionSuccess();
}

// ---- GEMM ----

struct GemmCase {
  std::int64_t batch;  // 0: 2-d operands
  std::int64_t m, n, k;
  bool trans_a, trans_b;
  float alpha, beta;
  DType a, b, c;
  bool tf32 = false;
};

std::string describe(const GemmCase& g) {
  std::ostringstream s;
  s << "batch " << g.batch << " m " << g.m << " n " << g.n << " k " << g.k << " trans " << g.trans_a << g.trans_b
    << " alpha " << g.alpha << " beta " << g.beta << " types " << dtype_name(g.a) << " " << dtype_name(g.b) << " -> "
    << dtype_name(g.c) << (g.tf32 ? " tf32" : "");
  return s.str();
}

Shape matrix(std::int64_t batch, std::int64_t rows, std::int64_t cols) {
  return batch > 0 ? Shape{batch, rows, cols} : Shape{rows, cols};
}

// Inputs are N(0, 1), so an output element sums k terms of size ~1: |c| ~ sqrt(k), and a rounding
// error per addition of ~eps * |partial sum| accumulates to ~eps * k in the worst case.
//
// f32: OpenBLAS and cuBLAS add the k products in different orders (blocking, FMA, split-K). At
// k = 129 each sum is off by ~eps * k ~ 1e-5 at most, typically far less: atol 1e-5 * sqrt(k) and
// the suite's fp32 rtol 1e-4 leave a ~10x margin and still catch any indexing error (O(1)).
// bf16 / f16 output: both backends accumulate in fp32 (16-bit products are exact in fp32) and
// round once (tensor cores add in their own fixed order), so the fp32 sums differ as above and the
// rounding may then fall either side: one output ulp, at most 2^-7 (bf16) or 2^-10 (f16) of the
// value.
// TF32: the operands lose their low 13 mantissa bits (relative error up to 2^-10 each if cut, half
// that if rounded), so each product is off by up to ~1e-3 of its size, signed like it: the sum is
// off by ~1e-3 * sqrt(k) rms (times |alpha| = 1.5 below). atol 1e-2 * sqrt(k) is ~6 of those
// sigmas (tens of thousands of elements are compared), rtol 2e-3 for the large elements.
testing::Tolerance gemm_tolerance(DType c, std::int64_t k, bool tf32) {
  const double scale = std::sqrt(double(k));
  if (tf32) return {1e-2 * scale, 2e-3};
  if (c == DType::bf16) return {1e-5 * scale, 8e-3};
  if (c == DType::f16) return {1e-5 * scale, 1e-3};
  return {1e-5 * scale, 1e-4};
}

// The GEMM on both backends. beta == 0: the CPU's c starts at zero and the GPU's at NaN, so a
// GPU that read c would produce NaN and fail the comparison.
void expect_gemm_matches_cpu(const GemmCase& g) {
  SCOPED_TRACE(describe(g));
  const Tensor a = randn_as(matrix(g.batch, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k), 11, g.a);
  const Tensor b = randn_as(matrix(g.batch, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n), 12, g.b);
  const Shape c_shape = matrix(g.batch, g.m, g.n);
  Tensor c = g.beta == 0.0f ? Tensor::zeros(c_shape, g.c) : randn_as(c_shape, 13, g.c);
  Tensor gc = g.beta == 0.0f ? nan_on_gpu(c_shape, g.c) : to_gpu(c);
  const ops::GemmOptions opt{
      .trans_a = g.trans_a, .trans_b = g.trans_b, .alpha = g.alpha, .beta = g.beta, .tf32 = g.tf32};
  ops::gemm(c, a, b, opt);
  ops::gemm(gc, to_gpu(a), to_gpu(b), opt);
  EXPECT_TRUE(all_close(gc, c, gemm_tolerance(g.c, g.k, g.tf32)));
}

// Every transpose pair, beta 0 and 1, alpha != 1, for one batch and element type.
void expect_all_transposes_match(std::int64_t batch, DType dtype, bool tf32) {
  for (bool trans_a : {false, true})
    for (bool trans_b : {false, true})
      for (float beta : {0.0f, 1.0f})
        expect_gemm_matches_cpu({batch, 37, 61, 129, trans_a, trans_b, -1.5f, beta, dtype, dtype, dtype, tf32});
}

class CudaGemm : public ::testing::TestWithParam<DType> {};

TEST_P(CudaGemm, EveryTransposeAndBeta2d) {
  TIDAL_REQUIRE_GPU();
  expect_all_transposes_match(0, GetParam(), false);
}

TEST_P(CudaGemm, EveryTransposeAndBetaBatched) {
  TIDAL_REQUIRE_GPU();
  expect_all_transposes_match(3, GetParam(), false);
}

// A Linear's forward, c = a b^T + bias, against the fp32 product plus the bias, rounded once to
// c's type. Where the sum cancels (|c| << |a b^T|), a 16-bit c can carry one rounding of the
// product itself: measured on an H100, cuBLASLt's bf16 epilogue gave -0.0625 where the one-rounding
// answer is -0.0669, a product of about 1.1 rounded to bf16 (ulp 2^-7) before the bias was added,
// as the CPU's unfused path does. So each element may differ by the GEMM tolerance plus one
// rounding of the product (u |p|, u = 2^-8 bf16, 2^-11 fp16; 0 for fp32 c). A bias view that is
// not 16-byte aligned takes the other path, the product and then ops::bias_add: the same bits as
// those two ops on the GPU.
TEST_P(CudaGemm, BiasInTheEpilogue) {
  TIDAL_REQUIRE_GPU();
  const DType dtype = GetParam();
  const std::int64_t m = 37, k = 129;
  const ops::GemmOptions linear{.trans_b = true};
  const testing::Tolerance tol = gemm_tolerance(dtype, k, false);
  const double product_rounding = dtype == DType::bf16 ? 1.0 / 256 : dtype == DType::f16 ? 1.0 / 2048 : 0.0;
  for (const std::int64_t n : {64, 61}) {
    SCOPED_TRACE("n " + std::to_string(n));
    const Tensor a = randn_as({m, k}, 31, dtype), b = randn_as({n, k}, 32, dtype);
    const Tensor bias_all = randn_as({n + 1}, 33, dtype);
    const Tensor ga = to_gpu(a), gb = to_gpu(b), gbias_all = to_gpu(bias_all);

    Tensor p32 = Tensor::empty({m, n}, DType::f32), bias32 = Tensor::empty({n}, DType::f32);
    ops::gemm(p32, a, b, linear);
    ops::cast(bias32, bias_all.slice(0, 0, n));
    Tensor c32 = p32.clone();
    ops::bias_add(c32, bias32);
    const Tensor gbias = gbias_all.slice(0, 0, n);
    Tensor gc = nan_on_gpu({m, n}, dtype);
    ops::gemm(gc, ga, gb, {.trans_b = true, .bias = &gbias});
    Tensor got = Tensor::empty({m, n}, DType::f32);
    ops::cast(got, to_host(gc));
    int bad = 0;
    for (std::int64_t i = 0; i < m * n; ++i) {
      const double want = c32.data<float>()[i], have = got.data<float>()[i], p = p32.data<float>()[i];
      const double bound = tol.atol + tol.rtol * std::abs(want) + product_rounding * std::abs(p);
      if (!(std::abs(have - want) <= bound) && bad++ < 5)
        ADD_FAILURE() << "element " << i << ": got " << have << ", want " << want << " (product " << p << ")";
    }
    EXPECT_EQ(bad, 0) << "bias in the epilogue";

    const Tensor shifted = gbias_all.slice(0, 1, n + 1);
    Tensor unfused = nan_on_gpu({m, n}, dtype), two_ops = nan_on_gpu({m, n}, dtype);
    ops::gemm(unfused, ga, gb, {.trans_b = true, .bias = &shifted});
    ops::gemm(two_ops, ga, gb, linear);
    ops::bias_add(two_ops, shifted);
    EXPECT_TRUE(all_close(unfused, two_ops, {0.0, 0.0})) << "a bias not 16-byte aligned";
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaGemm, ::testing::Values(DType::f32, DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(CudaGemmTf32, EveryTransposeAndBeta) {
  TIDAL_REQUIRE_GPU();
  expect_all_transposes_match(0, DType::f32, true);
  expect_all_transposes_match(3, DType::f32, true);
}

// The CPU backend takes any mix of float types; cuBLASLt runs 16-bit operands into fp32 c
// directly, and the other mixes go through fp32 copies.
TEST(CudaGemmMixed, EveryMixOfTypes) {
  TIDAL_REQUIRE_GPU();
  const std::vector<std::vector<DType>> mixes{
      {DType::bf16, DType::bf16, DType::f32}, {DType::f16, DType::f16, DType::f32},
      {DType::f32, DType::bf16, DType::f16},  {DType::bf16, DType::f16, DType::bf16},
      {DType::f16, DType::f32, DType::f32},   {DType::f32, DType::f32, DType::bf16}};
  for (const auto& mix : mixes)
    for (float beta : {0.0f, 1.0f})
      expect_gemm_matches_cpu({3, 37, 61, 129, true, false, 0.5f, beta, mix[0], mix[1], mix[2], false});
}

// Operands starting at odd offsets into their allocations (views into a chunk do): the plan is
// chosen for the pointers' actual alignment (4 bytes for f32 here, 2 for bf16).
TEST(CudaGemmViews, UnalignedOperands) {
  TIDAL_REQUIRE_GPU();
  const std::int64_t m = 37, n = 61, k = 129;
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const Tensor a_all = randn_as({m + 1, k}, 21, dtype), b_all = randn_as({k + 1, n}, 22, dtype);
    const Tensor c_all = randn_as({m + 1, n}, 23, dtype);
    const Tensor ga_all = to_gpu(a_all), gb_all = to_gpu(b_all), gc_all = to_gpu(c_all);
    const Tensor a = a_all.slice(0, 1, m + 1), b = b_all.slice(0, 1, k + 1);
    Tensor c = c_all.slice(0, 1, m + 1);
    const Tensor ga = ga_all.slice(0, 1, m + 1), gb = gb_all.slice(0, 1, k + 1);
    Tensor gc = gc_all.slice(0, 1, m + 1);
    const ops::GemmOptions opt{.alpha = 0.5f, .beta = 1.0f};
    ops::gemm(c, a, b, opt);
    ops::gemm(gc, ga, gb, opt);
    EXPECT_TRUE(all_close(gc, c, gemm_tolerance(dtype, k, false)));
    // Row 0 of c lies outside the view: untouched.
    EXPECT_TRUE(same_bits(gc_all.slice(0, 0, 1), c_all.slice(0, 0, 1), false));
  }
}

// Closed forms: an empty c is a no-op; k = 0 is an empty sum, so c = beta * c (beta 0: zeros, c
// never read).
TEST(CudaGemmEdges, EmptyOutputAndEmptySum) {
  TIDAL_REQUIRE_GPU();
  Allocator& gpu = gpu_allocator();
  Tensor empty = Tensor::empty({0, 5}, DType::f32, gpu);
  ops::gemm(empty, Tensor::empty({0, 3}, DType::f32, gpu), to_gpu(Tensor::zeros({3, 5})));

  const Tensor a = Tensor::empty({2, 7, 0}, DType::f32, gpu), b = Tensor::empty({2, 0, 5}, DType::f32, gpu);
  Tensor c = nan_on_gpu({2, 7, 5}, DType::bf16);
  ops::gemm(c, a, b, {.beta = 0.0f});
  EXPECT_TRUE(same_bits(c, Tensor::zeros({2, 7, 5}, DType::bf16), false));

  const Tensor c0 = randn_as({2, 7, 5}, 31, DType::f32);
  Tensor gc = to_gpu(c0);
  ops::gemm(gc, a, b, {.beta = 0.5f});
  Tensor half = c0.clone();
  for (std::int64_t i = 0; i < half.numel(); ++i) half.data<float>()[i] *= 0.5f;
  EXPECT_TRUE(same_bits(gc, half, false));
}

// The same GEMM twice gives the same bits (tidal compares losses bitwise between runs). Shapes
// include a long k with a small output, where cuBLASLt's heuristic tends to split k, and each run
// starts from a NaN c.
TEST(CudaGemmDeterminism, SameInputsSameBits) {
  TIDAL_REQUIRE_GPU();
  struct Case {
    std::int64_t batch, m, n, k;
    DType dtype;
    bool tf32;
  };
  for (const Case& t : {Case{0, 64, 64, 8192, DType::f32, false}, Case{0, 64, 64, 8192, DType::bf16, false},
                        Case{0, 64, 64, 8192, DType::f32, true}, Case{3, 256, 384, 1024, DType::bf16, false},
                        Case{3, 256, 384, 1024, DType::f16, false}}) {
    const GemmCase g{t.batch, t.m, t.n, t.k, false, true, 1.0f, 0.0f, t.dtype, t.dtype, t.dtype, t.tf32};
    SCOPED_TRACE(describe(g));
    const Tensor a = to_gpu(randn_as(matrix(g.batch, g.m, g.k), 41, g.a));
    const Tensor b = to_gpu(randn_as(matrix(g.batch, g.n, g.k), 42, g.b));
    const ops::GemmOptions opt{.trans_b = true, .tf32 = g.tf32};
    Tensor first = nan_on_gpu(matrix(g.batch, g.m, g.n), g.c), second = nan_on_gpu(matrix(g.batch, g.m, g.n), g.c);
    ops::gemm(first, a, b, opt);
    ops::gemm(second, a, b, opt);
    EXPECT_TRUE(same_bits(first, second, false));
    // And right, against the CPU (split-K included).
    Tensor ref = Tensor::zeros(matrix(g.batch, g.m, g.n), g.c);
    ops::gemm(ref, to_host(a), to_host(b), {.trans_b = true});
    EXPECT_TRUE(all_close(first, ref, gemm_tolerance(g.c, g.k, g.tf32)));
  }
}

// ---- cast ----

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Values that exercise each rounding: ties to even for bf16 and f16 (both directions), f16
// subnormals (and their ties), f16 overflow to inf, fp32 subnormals, infinities, NaN, signed zero.
std::vector<float> cast_specials() {
  return {0.0f, -0.0f, 1.0f, -2.5f, INFINITY, -INFINITY, kNaN,
          // bf16 ties at 1 + 2^-8 (to even: down), 1 + 3 * 2^-8 (to even: up), and either side of a tie
          from_bits(0x3f808000u), from_bits(0x3f818000u), from_bits(0xbf818000u), from_bits(0x3f808001u),
          from_bits(0x3f807fffu),
          // f16 ties at 1 + 2^-11 (down), 1 + 3 * 2^-11 (up)
          from_bits(0x3f801000u), from_bits(0x3f803000u), from_bits(0xbf803000u),
          // f16 subnormals: the smallest (2^-24), half of it (a tie: to zero), 3 * 2^-25 (a tie: up to
          // 2^-23), just over half, below half, a mid-range one, and just under the smallest normal
          std::ldexp(1.0f, -24), std::ldexp(1.0f, -25), 3.0f * std::ldexp(1.0f, -25),
          std::ldexp(1.0f, -25) * 1.0000001f, 1e-8f, -3e-7f, 1.234e-6f, std::ldexp(1.0f - std::ldexp(1.0f, -12), -14),
          std::ldexp(1.0f, -14),
          // f16 range: the largest finite, what still rounds to it, the tie that rounds to inf, beyond
          65504.0f, 65519.0f, 65520.0f, -65520.0f, 65536.0f, 1e5f, -1e6f,
          // fp32 extremes: largest finite (rounds to inf in bf16 too), subnormals
          std::numeric_limits<float>::max(), 1e-40f, -1.4e-45f, 1.1754942e-38f};
}

// Both backends widen exactly and round to nearest-even in one step, so the outputs must be
// identical bits: tolerance {0, 0}, plus a bitwise check (all_close sees +0 == -0).
TEST(CudaCast, EveryPairBitwiseEqualToCpu) {
  TIDAL_REQUIRE_GPU();
  std::vector<float> values = cast_specials();
  // Around 1, in f16's subnormal range, and across f16's overflow threshold.
  for (const auto& [std, key] : {std::pair{1.0f, 51}, std::pair{1e-6f, 52}, std::pair{3e4f, 53}}) {
    const Tensor r = randn({1001}, std::uint64_t(key), std);
    values.insert(values.end(), r.data<float>(), r.data<float>() + r.numel());
  }
  Tensor source = Tensor::empty({std::int64_t(values.size())});
  std::memcpy(source.raw(), values.data(), values.size() * sizeof(float));

  const DType dtypes[] = {DType::f32, DType::bf16, DType::f16};
  for (DType from : dtypes) {
    const Tensor src = as_dtype(source, from), gsrc = to_gpu(src);
    for (DType to : dtypes) {
      SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to)));
      Tensor ref = Tensor::empty(src.shape(), to), got = Tensor::empty(src.shape(), to, gpu_allocator());
      ops::cast(ref, src);
      ops::cast(got, gsrc);
      EXPECT_TRUE(all_close(got, ref, {0.0, 0.0}));
      EXPECT_TRUE(same_bits(got, ref, true));
    }
  }
}

TEST(CudaCast, EmptyTensor) {
  TIDAL_REQUIRE_GPU();
  const Tensor src = Tensor::empty({0, 7}, DType::f32, gpu_allocator());
  Tensor dst = Tensor::empty({0, 7}, DType::bf16, gpu_allocator());
  ops::cast(dst, src);
  EXPECT_EQ(dst.numel(), 0);
}

}  // namespace
}  // namespace tidal
