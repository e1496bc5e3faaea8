// Optimizer updates (AdamW, SGD) and the gradient norm on the GPU against the CPU backend on the
// same inputs: several steps compared step by step, fp32 parameters with fp32 and 16-bit
// gradients; the sum of squares exactly where the inputs make every order exact, and
// bitwise-reproducible run to run.
#include "ops/cast.h"
#include "ops/grad_norm.h"
#include "ops/optimizer_step.h"
#include "support/gpu.h"
#include "support/random.h"
#include "support/tolerance.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace tidal {
namespace {

using testing::all_close;
using testing::randn;
using testing::to_gpu;

// The two backends apply the same fp32 operations in the same order with correctly rounded sqrt
// and division, but each compiler fuses some multiply-adds into FMAs (GCC with -march=native
// does; nvcc does), so an element may differ by an ulp per step. Over five steps:
// parameters (|p| ~ 1): at most ~5 ulps, under 6e-7 relative;
constexpr testing::Tolerance kParam{1e-7, 1e-6};
// AdamW's m: ~5 ulps of its largest term (0.1 |g| <= 0.45, ulp 3e-8) where m cancels to near 0;
// v: a sum of positive terms, a few ulps relative;
constexpr testing::Tolerance kAdamM{2e-7, 1e-6};
constexpr testing::Tolerance kAdamV{1e-12, 1e-6};
// the SGD momentum buffer: ~5 ulps of terms up to ~8 (ulp 4.8e-7) where it cancels.
constexpr testing::Tolerance kSgdBuffer{5e-6, 1e-6};


class CudaOptim : public ::testing::TestWithParam<DType> {};

TEST_P(CudaOptim, AdamWMatchesCpuStepByStep) {
  TIDAL_REQUIRE_GPU();
  const DType grad_dtype = GetParam();
  const Shape shape{37, 101};
  // 16-bit gradients arrive loss-scaled; the update divides the scale out.
  const float grad_scale = grad_dtype == DType::f32 ? 1.0f : 8.0f;
  const ops::AdamWOptions opt{.lr = 1e-2f, .weight_decay = 0.1f, .grad_scale = grad_scale};
  Tensor p = randn(shape, 21), m = Tensor::zeros(shape), v = Tensor::zeros(shape);
  Tensor gp = to_gpu(p), gm = to_gpu(m), gv = to_gpu(v);
  for (std::int64_t step = 1; step <= 5; ++step) {
    const Tensor g = testing::randn_as(shape, 100 + std::uint64_t(step), grad_dtype, grad_scale);
    ops::adamw_step(p, g, m, v, opt, step);
    ops::adamw_step(gp, to_gpu(g), gm, gv, opt, step);
    EXPECT_TRUE(all_close(gp, p, kParam)) << "param, step " << step;
    EXPECT_TRUE(all_close(gm, m, kAdamM)) << "m, step " << step;
    EXPECT_TRUE(all_close(gv, v, kAdamV)) << "v, step " << step;
  }
}

TEST_P(CudaOptim, AdamWWritesTheCopyAsACastAfterItWould) {
  // A chunk's step on the GPU: the copy over the gradient's storage (a 16-bit gradient) or apart,
  // bitwise the update then ops::cast on the GPU.
  TIDAL_REQUIRE_GPU();
  const DType grad_dtype = GetParam(), copy_dtype = grad_dtype == DType::f32 ? DType::bf16 : grad_dtype;
  const Shape shape{37, 101};
  const ops::AdamWOptions opt{.lr = 1e-2f, .weight_decay = 0.1f, .grad_scale = 8.0f};
  for (const bool shared : {true, false}) {
    if (shared && grad_dtype == DType::f32) continue;  // a 16-bit copy cannot lie over an fp32 gradient
    SCOPED_TRACE(shared ? "the copy over the gradient" : "the copy apart");
    Tensor p = to_gpu(randn(shape, 41)), m = to_gpu(randn(shape, 42)), v = to_gpu(Tensor::zeros(shape));
    Tensor p_ref = to_gpu(randn(shape, 41)), m_ref = to_gpu(randn(shape, 42)), v_ref = to_gpu(Tensor::zeros(shape));
    const Tensor g = to_gpu(testing::randn_as(shape, 43, grad_dtype, 8.0f));
    Tensor slot = to_gpu(testing::randn_as(shape, 43, grad_dtype, 8.0f));
    Tensor copy = shared ? slot : to_gpu(Tensor::zeros(shape, copy_dtype));
    ops::adamw_step(p, slot, m, v, opt, 2, &copy);
    ops::adamw_step(p_ref, g, m_ref, v_ref, opt, 2);
    Tensor want = to_gpu(Tensor::zeros(shape, copy_dtype));
    ops::cast(want, p_ref);
    EXPECT_TRUE(all_close(p, p_ref, {0, 0}));
    EXPECT_TRUE(all_close(copy, want, {0, 0}));
  }
}

TEST_P(CudaOptim, AdamWStepsInOneLaunchAreEachTensorsOwnStep) {
  // ops::adamw_steps over more tensors than one launch's list (24), of odd sizes, empty ones and
  // one of several of its blocks, the copies over the 16-bit gradients or apart (an fp32
  // gradient): bitwise adamw_step on each, on the GPU.
  TIDAL_REQUIRE_GPU();
  const DType grad_dtype = GetParam();
  const ops::AdamWOptions opt{.lr = 1e-2f, .weight_decay = 0.1f, .grad_scale = 8.0f};
  std::vector<ops::AdamWTensors> list, each;
  for (int i = 0; i < 30; ++i) {
    const std::int64_t n = i == 3 || i == 25 ? 0 : i == 7 ? 20000 : 37 * i + 1;
    const Tensor p = randn({n}, 50 + std::uint64_t(i)), m = randn({n}, 90 + std::uint64_t(i), 0.1f);
    const Tensor g = testing::randn_as({n}, 130 + std::uint64_t(i), grad_dtype, 8.0f);
    for (auto* l : {&list, &each}) {
      Tensor slot = to_gpu(g);
      Tensor low = grad_dtype == DType::f32 ? to_gpu(Tensor::zeros({n}, DType::bf16)) : slot;
      l->push_back({.param = to_gpu(p), .grad = slot, .m = to_gpu(m), .v = to_gpu(Tensor::zeros({n})), .low = low});
    }
  }
  ops::adamw_steps(list, opt, 2);
  for (ops::AdamWTensors& t : each) ops::adamw_step(t.param, t.grad, t.m, t.v, opt, 2, &t.low);
  for (std::size_t i = 0; i < list.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(all_close(list[i].param, each[i].param, {0, 0}));
    EXPECT_TRUE(all_close(list[i].m, each[i].m, {0, 0}));
    EXPECT_TRUE(all_close(list[i].v, each[i].v, {0, 0}));
    EXPECT_TRUE(all_close(list[i].low, each[i].low, {0, 0}));
  }
}

TEST_P(CudaOptim, SgdMatchesCpuStepByStep) {
  TIDAL_REQUIRE_GPU();
  const DType grad_dtype = GetParam();
  const Shape shape{29, 53};
  for (const float momentum : {0.0f, 0.9f}) {
    const ops::SgdOptions opt{.lr = 1e-2f, .momentum = momentum, .weight_decay = 1e-2f};
    Tensor p = randn(shape, 31), buf = randn(shape, 32);  // a stale buffer: the first step must overwrite it
    Tensor gp = to_gpu(p), gbuf = to_gpu(buf);
    for (int step = 1; step <= 5; ++step) {
      const Tensor g = testing::randn_as(shape, 200 + std::uint64_t(step), grad_dtype, 1.0f);
      ops::sgd_step(p, g, buf, opt, step == 1);
      ops::sgd_step(gp, to_gpu(g), gbuf, opt, step == 1);
      EXPECT_TRUE(all_close(gp, p, kParam)) << "param, momentum " << momentum << ", step " << step;
      EXPECT_TRUE(all_close(gbuf, buf, kSgdBuffer)) << "buffer, momentum " << momentum << ", step " << step;
    }
  }
}

// Sizes around the 2^14-element chunk, and one over 1024 chunks (the final pass strides).
const std::int64_t kNormSizes[] = {1, 16383, 16384, 16385, 100003, (std::int64_t(1) << 24) + 5};

// Values k/64 (bf16 rounds those beyond 4 to a coarser multiple of 1/64): their squares, multiples
// of 2^-12, add exactly in double while the total stays under 2^41, so every summation order gives
// the same bits.
TEST_P(CudaOptim, SumOfSquaresOfExactValuesMatchesBitwise) {
  TIDAL_REQUIRE_GPU();
  const DType dtype = GetParam();
  for (const std::int64_t n : kNormSizes) {
    Tensor f = randn({n}, 41);
    for (std::int64_t i = 0; i < n; ++i) f.data<float>()[i] = std::nearbyint(f.data<float>()[i] * 64.0f) / 64.0f;
    Tensor x = f;
    if (dtype != DType::f32) {
      x = Tensor::empty({n}, dtype);
      ops::cast(x, f);
    }
    EXPECT_EQ(ops::sum_of_squares(to_gpu(x)), ops::sum_of_squares(x)) << "n " << n;
  }
  EXPECT_EQ(ops::sum_of_squares(Tensor::empty({0}, dtype, gpu_allocator())), 0.0);
}

// General values: the squares are exact in double and only the order of the additions differs;
// the CPU adds runs of 2^14 in sequence (worst-case relative error 2^14 * 2^-53 = 1.8e-12), so
// 1e-11 bounds the difference. Two GPU runs agree bitwise.
TEST_P(CudaOptim, SumOfSquaresIsDeterministicAndMatchesCpu) {
  TIDAL_REQUIRE_GPU();
  const DType dtype = GetParam();
  for (const std::int64_t n : kNormSizes) {
    const Tensor x = testing::randn_as({n}, 42, dtype, 3.0f);
    const Tensor gx = to_gpu(x);
    const double cpu = ops::sum_of_squares(x), gpu = ops::sum_of_squares(gx);
    EXPECT_NEAR(gpu, cpu, 1e-11 * cpu) << "n " << n;
    EXPECT_EQ(ops::sum_of_squares(gx), gpu) << "two runs differ, n " << n;
  }
}

// A batch (GPU tensors of every size, an empty one, a host one among them) gives each tensor's
// own sum, bitwise, in the list's order.
TEST_P(CudaOptim, SumsOfSquaresOfABatchAreEachTensorsOwn) {
  TIDAL_REQUIRE_GPU();
  const DType dtype = GetParam();
  std::vector<Tensor> batch;
  for (const std::int64_t n : kNormSizes) batch.push_back(to_gpu(testing::randn_as({n}, 50 + n, dtype, 3.0f)));
  batch.push_back(Tensor::empty({0}, dtype, gpu_allocator()));
  batch.push_back(testing::randn_as({1000}, 49, dtype));  // on the host
  const std::vector<double> sums = ops::sums_of_squares(batch);
  ASSERT_EQ(sums.size(), batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i)
    EXPECT_EQ(sums[i], ops::sum_of_squares(batch[i])) << "tensor " << i << " " << batch[i].str();
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaOptim, ::testing::Values(DType::f32, DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Global norm and clipping over GPU gradients: the norm as the CPU's (summation order only), and
// the clipped gradients scaled by the same float coefficient: one fp32 multiply each, so the same
// bits unless the last-bit noise of the norm moved float(coef) by an ulp (then one ulp).
TEST(CudaGradNorm, ClipGradNormMatchesCpu) {
  TIDAL_REQUIRE_GPU();
  std::vector<Tensor> cpu_grads, gpu_grads;
  const Shape shapes[] = {{37, 101}, {101}, {3, 5, 7}, {20001}};
  for (std::size_t i = 0; i < std::size(shapes); ++i) {
    cpu_grads.push_back(randn(shapes[i], 50 + i, 2.0f));
    gpu_grads.push_back(to_gpu(cpu_grads.back()));
  }
  const double cpu_norm = ops::global_norm(cpu_grads);
  EXPECT_NEAR(ops::global_norm(gpu_grads), cpu_norm, 1e-11 * cpu_norm);

  const double max_norm = 0.25 * cpu_norm;  // clipping applies
  const double cpu_before = ops::clip_grad_norm(cpu_grads, max_norm);
  const double gpu_before = ops::clip_grad_norm(gpu_grads, max_norm);
  EXPECT_NEAR(gpu_before, cpu_before, 1e-11 * cpu_before);
  for (std::size_t i = 0; i < cpu_grads.size(); ++i)
    EXPECT_TRUE(all_close(gpu_grads[i], cpu_grads[i], testing::Tolerance{0.0, 2.4e-7})) << "tensor " << i;
  EXPECT_NEAR(ops::global_norm(gpu_grads), max_norm, 1e-6 * max_norm);
}

}  // namespace
}  // namespace tidal
