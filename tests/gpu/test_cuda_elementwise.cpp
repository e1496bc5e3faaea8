// Elementwise and index-mapping op families on the GPU (gelu, bias, residual, dropout, class
// token, patchify) against the CPU backend on the same inputs, forward and backward, fp32 and the
// 16-bit storage types, on odd sizes.
#include "ops/bias.h"
#include "ops/cast.h"
#include "ops/class_token.h"
#include "ops/dropout.h"
#include "ops/gelu.h"
#include "ops/patchify.h"
#include "ops/residual.h"
#include "support/gpu.h"
#include "support/random.h"
#include "support/tolerance.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tidal {
namespace {

using testing::all_close;
using testing::randn;
using testing::randn_as;
using testing::gpu_empty;
using testing::to_gpu;

// Same fp32 math on both sides; tanhf and std::tanh differ in the last ulp or two.
constexpr testing::Tolerance kFp32Kernel{1e-6, 1e-5};
// Both backends compute in fp32 and round to nearest-even; an fp32 difference of a few ulps can
// flip one rounding: one 16-bit ulp (2^-8 relative for bf16, 2^-11 for fp16).
constexpr testing::Tolerance kBf16{1e-6, 8e-3};
constexpr testing::Tolerance kF16{1e-6, 1e-3};
// One fp32 operation per element (or a bit copy) on both sides, rounded once the same way:
// the same bits.
constexpr testing::Tolerance kExact{0.0, 0.0};

testing::Tolerance tolerance_for(DType dtype) {
  return dtype == DType::f32 ? kFp32Kernel : dtype == DType::bf16 ? kBf16 : kF16;
}


class CudaElementwise : public ::testing::TestWithParam<DType> {};

// Elements [1, n + 1) of a fresh GPU copy of t's n: a contiguous view whose data is not 16-byte
// aligned, so a kernel must take its one-element-an-access path.
Tensor misaligned_gpu_copy(const Tensor& t) {
  Tensor flat = gpu_empty({t.numel() + 1}, t.dtype());
  Tensor view = flat.slice(0, 1, t.numel() + 1).reshape(t.shape());
  view.copy_from(to_gpu(t));
  return view;
}

TEST_P(CudaElementwise, GeluForwardAndBackward) {
  TIDAL_REQUIRE_GPU();
  const DType dtype = GetParam();
  // 37 x 101: packs of 16 bytes and a tail of single elements; 64 x 256: packs only.
  for (const Shape& shape : {Shape{37, 101}, Shape{64, 256}}) {
    SCOPED_TRACE(shape.str());
    Tensor x = randn_as(shape, 1, dtype, 2.0f), dy = randn_as(shape, 2, dtype);
    Tensor y = Tensor::empty(shape, dtype), dx = Tensor::empty(shape, dtype);
    for (ops::GeluForm form : {ops::GeluForm::tanh, ops::GeluForm::erf}) {
      ops::gelu_forward(y, x, form);
      ops::gelu_backward(dx, dy, x, form);
      Tensor gx = to_gpu(x), gdy = to_gpu(dy);
      Tensor gy = gpu_empty(shape, dtype), gdx = gpu_empty(shape, dtype);
      ops::gelu_forward(gy, gx, form);
      ops::gelu_backward(gdx, gdy, gx, form);
      EXPECT_TRUE(all_close(gy, y, tolerance_for(dtype))) << "form " << int(form);
      EXPECT_TRUE(all_close(gdx, dx, tolerance_for(dtype))) << "form " << int(form);
      Tensor my = misaligned_gpu_copy(y), mdx = misaligned_gpu_copy(dx);
      ops::gelu_forward(my, misaligned_gpu_copy(x), form);
      ops::gelu_backward(mdx, misaligned_gpu_copy(dy), misaligned_gpu_copy(x), form);
      EXPECT_TRUE(all_close(my, gy, kExact)) << "misaligned, form " << int(form);
      EXPECT_TRUE(all_close(mdx, gdx, kExact)) << "misaligned, form " << int(form);
    }
  }
}

// Values k/64: fp32 and fp16 hold them exactly and bf16 rounds only those beyond 4, to a coarser
// multiple of 1/64. Every partial sum under 2^18 is then exact in fp32, so a reduction gives the
// same bits in any order.
Tensor quantized_randn(const Shape& shape, std::uint64_t key, DType dtype) {
  Tensor f = randn(shape, key);
  for (std::int64_t i = 0; i < f.numel(); ++i) f.data<float>()[i] = std::nearbyint(f.data<float>()[i] * 64.0f) / 64.0f;
  if (dtype == DType::f32) return f;
  Tensor t = Tensor::empty(shape, dtype);
  ops::cast(t, f);
  return t;
}

TEST_P(CudaElementwise, BiasAddMatchesBitwise) {
  TIDAL_REQUIRE_GPU();
  const DType dtype = GetParam();
  // Width 101: one element an access; 256: 16-byte packs; a misaligned copy of the second.
  for (const std::int64_t C : {101, 256}) {
    Tensor y = randn_as({3, 37, C}, 3, dtype), b = randn_as({C}, 4, dtype);
    Tensor gy = to_gpu(y), gb = to_gpu(b), my = misaligned_gpu_copy(y);
    ops::bias_add(y, b);
    ops::bias_add(gy, gb);
    ops::bias_add(my, gb);
    EXPECT_TRUE(all_close(gy, y, kExact)) << "C " << C;
    EXPECT_TRUE(all_close(my, y, kExact)) << "C " << C << ", misaligned";
  }
}

// Column sums of exactly representable values: the GPU's chunked order must give the CPU's bits.
// [5, 61, 101] has 305 rows (several 64-row chunks, a partial 32-column tile); [70001, 3] has more
// rows than 64 * the 1024-chunk cap, so chunks grow to 69 rows.
TEST_P(CudaElementwise, BiasGradOfExactValuesMatchesBitwise) {
  TIDAL_REQUIRE_GPU();
  const DType dtype = GetParam();
  // Widths 256 and 264 (multiples of 8): 16-byte accesses, the second with a partial column tile.
  for (const Shape& shape : {Shape{5, 61, 101}, Shape{70001, 3}, Shape{1, 7}, Shape{5, 61, 256}, Shape{130, 264}}) {
    const std::int64_t C = shape.dim(-1);
    Tensor dy = quantized_randn(shape, 5, dtype), db = quantized_randn({C}, 6, dtype);
    Tensor gdy = to_gpu(dy), gdb = to_gpu(db);
    ops::bias_grad(db, dy);
    ops::bias_grad(gdb, gdy);
    EXPECT_TRUE(all_close(gdb, db, kExact)) << shape.str();
  }
}

// fp32 column sums of 305 unit-variance values in two orders: the CPU's running sum (|s| ~ 10,
// ulp ~ 1e-6) random-walks to ~5e-6; the worst of 101 columns stays well under 1e-4. 16-bit: plus
// one storage ulp where that flips a rounding.
TEST_P(CudaElementwise, BiasGradAccumulatesColumnSumsDeterministically) {
  TIDAL_REQUIRE_GPU();
  const DType dtype = GetParam();
  const testing::Tolerance tol = dtype == DType::f32    ? testing::Tolerance{1e-4, 1e-6}
                                 : dtype == DType::bf16 ? testing::Tolerance{1e-4, 8e-3}
                                                        : testing::Tolerance{1e-4, 1e-3};
  Tensor dy = randn_as({5, 61, 101}, 7, dtype), db = randn_as({101}, 8, dtype);
  Tensor gdy = to_gpu(dy), gdb = to_gpu(db), gdb_again = to_gpu(db);
  ops::bias_grad(db, dy);
  ops::bias_grad(gdb, gdy);
  ops::bias_grad(gdb_again, gdy);
  EXPECT_TRUE(all_close(gdb, db, tol));
  EXPECT_TRUE(all_close(gdb_again, gdb, kExact)) << "two runs on the same inputs differ";
}

TEST_P(CudaElementwise, ResidualAccumulateAndScaleMatchBitwise) {
  TIDAL_REQUIRE_GPU();
  const DType dtype = GetParam();
  const Shape shape{29, 43};
  Tensor a = randn_as(shape, 9, dtype), b = randn_as(shape, 10, dtype), y = Tensor::empty(shape, dtype);
  Tensor ga = to_gpu(a), gb = to_gpu(b), gy = gpu_empty(shape, dtype);
  ops::residual_add(y, a, b);
  ops::residual_add(gy, ga, gb);
  EXPECT_TRUE(all_close(gy, y, kExact)) << "residual_add";

  // In place, y aliasing either operand.
  Tensor ga2 = to_gpu(a), gb2 = to_gpu(b);
  ops::residual_add(ga2, ga2, gb);
  ops::residual_add(gb2, ga, gb2);
  EXPECT_TRUE(all_close(ga2, y, kExact)) << "residual_add into a";
  EXPECT_TRUE(all_close(gb2, y, kExact)) << "residual_add into b";

  ops::accumulate(a, b);
  ops::accumulate(ga, gb);
  EXPECT_TRUE(all_close(ga, a, kExact)) << "accumulate";

  ops::scale(a, 0.37f);
  ops::scale(ga, 0.37f);
  EXPECT_TRUE(all_close(ga, a, kExact)) << "scale";

  // Misaligned views: one element an access.
  Tensor ma = misaligned_gpu_copy(a), mb = misaligned_gpu_copy(b);
  ops::residual_add(ma, ma, mb);
  ops::residual_add(a, a, b);
  EXPECT_TRUE(all_close(ma, a, kExact)) << "residual_add, misaligned";
}

// The GPU draws the CPU's mask: the same Philox blocks, including a tensor whose element 0 sits
// mid-block (first_element not a multiple of 4) and one past block 2^32 (the counter's high
// word), and the same fp32 multiply by 1 / (1 - p): the same bits, forward, backward, in place.
TEST_P(CudaElementwise, DropoutMatchesTheCpuMaskBitwise) {
  TIDAL_REQUIRE_GPU();
  const DType dtype = GetParam();
  const Shape shape{7, 53};  // 371 elements: not a whole number of Philox blocks
  const float p = 0.3f;
  Tensor x = randn_as(shape, 11, dtype), dy = randn_as(shape, 12, dtype);
  for (const std::int64_t first : {std::int64_t(0), std::int64_t(1), std::int64_t(2), std::int64_t(3),
                                   std::int64_t(4), std::int64_t(1001), (std::int64_t(1) << 34) + 3}) {
    const ops::DropoutKey key{
        .seed = 0x0123456789abcdefULL, .layer = 0xdeadbeef00000007ULL, .step = 5, .micro_batch = 2, .first_element = first};
    Tensor y = Tensor::empty(shape, dtype), dx = Tensor::empty(shape, dtype);
    ops::dropout_forward(y, x, p, key);
    ops::dropout_backward(dx, dy, p, key);

    Tensor gx = to_gpu(x), gdy = to_gpu(dy), gy = gpu_empty(shape, dtype), gdx = gpu_empty(shape, dtype);
    ops::dropout_forward(gy, gx, p, key);
    ops::dropout_backward(gdx, gdy, p, key);
    EXPECT_TRUE(all_close(gy, y, kExact)) << "forward, first_element " << first;
    EXPECT_TRUE(all_close(gdx, dx, kExact)) << "backward, first_element " << first;

    ops::dropout_forward(gx, gx, p, key);
    EXPECT_TRUE(all_close(gx, y, kExact)) << "in place, first_element " << first;

    // Not vacuous: about p of the elements are dropped (4 standard deviations at 371 draws).
    Tensor x32 = Tensor::empty(shape), y32 = Tensor::empty(shape);
    ops::cast(x32, x);
    ops::cast(y32, y);
    std::int64_t dropped = 0;
    for (std::int64_t i = 0; i < y32.numel(); ++i)
      dropped += y32.data<float>()[i] == 0.0f && x32.data<float>()[i] != 0.0f;
    EXPECT_NEAR(double(dropped) / double(y32.numel()), p, 0.1) << "first_element " << first;
  }
}

TEST_P(CudaElementwise, ClassTokenPrependAndSelectMatchBitwise) {
  TIDAL_REQUIRE_GPU();
  const DType dtype = GetParam();
  const std::int64_t B = 3, N = 17, D = 45;
  Tensor x = randn_as({B, N, D}, 13, dtype), token = randn_as({D}, 14, dtype);
  Tensor y = Tensor::empty({B, N + 1, D}, dtype), gy = gpu_empty({B, N + 1, D}, dtype);
  ops::prepend_token(y, x, token);
  ops::prepend_token(gy, to_gpu(x), to_gpu(token));
  EXPECT_TRUE(all_close(gy, y, kExact)) << "prepend_token";

  // dtoken accumulates the batch in order (rounding after each add on both sides).
  Tensor dy = randn_as({B, N + 1, D}, 15, dtype), dx = Tensor::empty({B, N, D}, dtype);
  Tensor dtoken = randn_as({D}, 16, dtype);
  Tensor gdx = gpu_empty({B, N, D}, dtype), gdtoken = to_gpu(dtoken);
  ops::prepend_token_backward(dx, dtoken, dy);
  ops::prepend_token_backward(gdx, gdtoken, to_gpu(dy));
  EXPECT_TRUE(all_close(gdx, dx, kExact)) << "prepend_token_backward dx";
  EXPECT_TRUE(all_close(gdtoken, dtoken, kExact)) << "prepend_token_backward dtoken";

  for (const std::int64_t index : {std::int64_t(0), std::int64_t(7), N}) {
    Tensor s = Tensor::empty({B, D}, dtype), gs = gpu_empty({B, D}, dtype);
    ops::select_token(s, y, index);
    ops::select_token(gs, gy, index);
    EXPECT_TRUE(all_close(gs, s, kExact)) << "select_token " << index;

    Tensor ds = randn_as({B, D}, 17, dtype);
    Tensor dsel = Tensor::empty({B, N + 1, D}, dtype), gdsel = to_gpu(randn_as({B, N + 1, D}, 18, dtype));
    ops::select_token_backward(dsel, ds, index);
    ops::select_token_backward(gdsel, to_gpu(ds), index);  // overwrites every element, garbage included
    EXPECT_TRUE(all_close(gdsel, dsel, kExact)) << "select_token_backward " << index;
  }
}

TEST_P(CudaElementwise, PatchifyMatchesBitwise) {
  TIDAL_REQUIRE_GPU();
  const DType dtype = GetParam();
  struct Case {
    Shape images;
    std::int64_t patch;
  };
  for (const Case& c : {Case{{2, 3, 12, 20}, 4}, Case{{3, 5, 9, 15}, 3}, Case{{1, 2, 5, 7}, 1}}) {
    const std::int64_t B = c.images[0], Ch = c.images[1], H = c.images[2], W = c.images[3], P = c.patch;
    const Shape out{B, (H / P) * (W / P), Ch * P * P};
    Tensor images = randn_as(c.images, 19, dtype), patches = Tensor::empty(out, dtype), gpatches = gpu_empty(out, dtype);
    ops::patchify(patches, images, P);
    ops::patchify(gpatches, to_gpu(images), P);
    EXPECT_TRUE(all_close(gpatches, patches, kExact)) << c.images.str() << " patch " << P;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaElementwise, ::testing::Values(DType::f32, DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace tidal
