// A split norm's ops on the GPU (2D / 2.5D / 3D tensor parallelism's LayerNorm and RMSNorm,
// ops/split_norm.h) against the CPU backend on the same inputs: the rows' sums, y and the
// (mean, rstd) written over them, the weight gradients accumulated, the gradient's sums and dx, on
// odd shapes; dw and db bitwise reproducible; empty inputs.
#include "ops/split_norm.h"
#include "support/gpu.h"
#include "support/random.h"
#include "support/tolerance.h"

#include <gtest/gtest.h>

#include <cstring>

namespace tidal {
namespace {

using testing::all_close;
using testing::gpu_empty;
using testing::randn;
using testing::to_gpu;
using testing::to_host;

// Row sums: the CPU adds in double, the GPU in fp32 in a tree; they differ by rounding only.
constexpr testing::Tolerance kSums = testing::kFp32;  // {1e-5, 1e-4}

class CudaSplitNorm : public ::testing::TestWithParam<bool> {};

TEST_P(CudaSplitNorm, AgainstTheCpu) {
  TIDAL_REQUIRE_GPU();
  const bool centered = GetParam();
  // 1000 rows: several chunks of the weight gradients' partial sums, the last one short.
  for (const Shape& shape : {Shape{37, 771}, Shape{1000, 129}, Shape{3, 13, 96}}) {
    SCOPED_TRACE(shape.str());
    const std::int64_t C = shape.dim(-1), N = shape.numel() / C;
    // This rank holds C of the row's 3 C features; the others' sums are stood in for by a shift.
    const ops::SplitNormOptions opt{.centered = centered, .full = 3 * C, .eps = 1e-5f};
    const Tensor x = randn(shape, 1, 2.0f), dy = randn(shape, 2), w = randn({C}, 3), b = randn({C}, 4);
    const Tensor dw0 = randn({C}, 5), db0 = randn({C}, 6);
    Tensor stats = Tensor::empty({N, 2}), gstats = gpu_empty({N, 2});
    ops::split_norm_sums(stats, x, opt);
    ops::split_norm_sums(gstats, to_gpu(x), opt);
    EXPECT_TRUE(all_close(gstats, stats, kSums));
    // The group's sums: three times this rank's (the CPU's, on both sides).
    for (std::int64_t i = 0; i < 2 * N; ++i) stats.data<float>()[i] *= 3.0f;
    gstats = to_gpu(stats);

    const Tensor bias = centered ? b : Tensor(), gbias = centered ? to_gpu(b) : Tensor();
    Tensor y = Tensor::empty(shape), gy = gpu_empty(shape);
    ops::split_norm_forward(y, stats, x, w, bias, opt);
    ops::split_norm_forward(gy, gstats, to_gpu(x), to_gpu(w), gbias, opt);
    EXPECT_TRUE(all_close(gy, y, kSums));
    EXPECT_TRUE(all_close(gstats, stats, kSums));  // (mean, rstd)

    Tensor dw = dw0.clone(), db = centered ? db0.clone() : Tensor();
    Tensor gdw = to_gpu(dw0), gdb = centered ? to_gpu(db0) : Tensor();
    const Tensor gx = to_gpu(x), gdy = to_gpu(dy), gw = to_gpu(w);
    ops::split_norm_weight_grads(dw, db, dy, x, stats);
    ops::split_norm_weight_grads(gdw, gdb, gdy, gx, gstats);
    EXPECT_TRUE(all_close(gdw, dw, kSums));
    if (centered) {
      EXPECT_TRUE(all_close(gdb, db, kSums));
    }
    // The column sums run in a fixed order: a second run gives the same bits.
    Tensor gdw2 = to_gpu(dw0), gdb2 = centered ? to_gpu(db0) : Tensor();
    ops::split_norm_weight_grads(gdw2, gdb2, gdy, gx, gstats);
    const Tensor a = to_host(gdw), a2 = to_host(gdw2);
    EXPECT_EQ(std::memcmp(a.raw(), a2.raw(), a.nbytes()), 0);

    Tensor sums = Tensor::empty({N, 2}), gsums = gpu_empty({N, 2});
    ops::split_norm_grad_sums(sums, dy, x, stats, w, opt);
    ops::split_norm_grad_sums(gsums, gdy, gx, gstats, gw, opt);
    EXPECT_TRUE(all_close(gsums, sums, kSums));
    Tensor dx = Tensor::empty(shape), gdx = gpu_empty(shape);
    ops::split_norm_backward(dx, dy, x, stats, w, sums, opt);
    ops::split_norm_backward(gdx, gdy, gx, gstats, gw, to_gpu(sums), opt);
    EXPECT_TRUE(all_close(gdx, dx, kSums));
  }
}

TEST_P(CudaSplitNorm, EmptyInputsLaunchNothing) {
  TIDAL_REQUIRE_GPU();
  const ops::SplitNormOptions opt{.centered = GetParam(), .full = 8, .eps = 1e-5f};
  Tensor x = gpu_empty({0, 4}), stats = gpu_empty({0, 2}), y = gpu_empty({0, 4}), w = to_gpu(randn({4}, 1));
  Tensor dw = to_gpu(randn({4}, 2)), none;
  const Tensor before = to_host(dw);
  ops::split_norm_sums(stats, x, opt);
  ops::split_norm_forward(y, stats, x, w, none, opt);
  ops::split_norm_weight_grads(dw, none, x, x, stats);
  const Tensor after = to_host(dw);
  EXPECT_EQ(std::memcmp(before.raw(), after.raw(), before.nbytes()), 0);
}

INSTANTIATE_TEST_SUITE_P(, CudaSplitNorm, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "LayerNorm" : "RmsNorm"; });

}  // namespace
}  // namespace tidal
