// The Llama family's ops on the GPU (RMSNorm, rotary embeddings, SwiGLU) against the CPU backend
// on the same inputs, forward and backward, fp32 and the 16-bit storage types, on odd shapes.
// Also: RMSNorm's dw bitwise reproducible, and empty inputs.
#include "ops/cast.h"
#include "ops/rms_norm.h"
#include "ops/rotary.h"
#include "ops/swiglu.h"
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
using testing::randn_as;
using testing::to_gpu;
using testing::to_host;
using testing::Tolerance;

// Row reductions (RMSNorm's mean of squares, its backward's mean and dw): the CPU adds
// sequentially, the GPU in a tree, so fp32 results differ by summation order only; a 16-bit
// output may then flip by one ulp: 2^-7 relative at worst for bf16, 2^-10 for fp16.
constexpr Tolerance kFp32Sums = testing::kFp32;  // {1e-5, 1e-4}
constexpr Tolerance kBf16Sums{1e-5, 8e-3};
constexpr Tolerance kF16Sums{1e-5, 1e-3};
// Elementwise (rotation, SwiGLU): the same fp32 formula on both sides, differing by contraction
// into FMAs and expf against the CPU's polynomial exp (2 ulp): a few fp32 ulps; a 16-bit output
// may flip by one ulp.
constexpr Tolerance kFp32Kernel{1e-6, 1e-5};
constexpr Tolerance kBf16Kernel{1e-6, 8e-3};
constexpr Tolerance kF16Kernel{1e-6, 1e-3};

Tolerance sums_tolerance(DType dtype) {
  return dtype == DType::f32 ? kFp32Sums : dtype == DType::bf16 ? kBf16Sums : kF16Sums;
}

Tolerance kernel_tolerance(DType dtype) {
  return dtype == DType::f32 ? kFp32Kernel : dtype == DType::bf16 ? kBf16Kernel : kF16Kernel;
}

class CudaLlamaOps : public ::testing::TestWithParam<DType> {};

TEST_P(CudaLlamaOps, RmsNormForwardAndBackward) {
  TIDAL_REQUIRE_GPU();
  const DType dtype = GetParam();
  // 1000 rows: several chunks of dw's partial sums, the last one short.
  for (const Shape& shape : {Shape{37, 771}, Shape{1000, 129}, Shape{3, 13, 96}}) {
    SCOPED_TRACE(shape.str());
    const std::int64_t C = shape.dim(-1), N = shape.numel() / C;
    Tensor x = randn_as(shape, 1, dtype, 2.0f), dy = randn_as(shape, 2, dtype), w = randn({C}, 3), dw0 = randn({C}, 4);
    Tensor y = Tensor::empty(shape, dtype), rstd = Tensor::empty({N}), dx = Tensor::empty(shape, dtype),
           dw = dw0.clone();
    ops::rms_norm_forward(y, rstd, x, w, 1e-5f);
    ops::rms_norm_backward(dx, dw, dy, x, w, rstd);

    Tensor gx = to_gpu(x), gdy = to_gpu(dy), gw = to_gpu(w), gdw = to_gpu(dw0);
    Tensor gy = gpu_empty(shape, dtype), grstd = gpu_empty({N}), gdx = gpu_empty(shape, dtype);
    ops::rms_norm_forward(gy, grstd, gx, gw, 1e-5f);
    ops::rms_norm_backward(gdx, gdw, gdy, gx, gw, grstd);
    EXPECT_TRUE(all_close(gy, y, sums_tolerance(dtype)));
    EXPECT_TRUE(all_close(grstd, rstd, kFp32Sums));
    EXPECT_TRUE(all_close(gdx, dx, sums_tolerance(dtype)));
    EXPECT_TRUE(all_close(gdw, dw, kFp32Sums));  // fp32 whatever x's dtype

    // dw's column sums run in a fixed order: a second run gives the same bits.
    Tensor gdw2 = to_gpu(dw0);
    ops::rms_norm_backward(gdx, gdw2, gdy, gx, gw, grstd);
    const Tensor a = to_host(gdw), b = to_host(gdw2);
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);
  }
}

TEST_P(CudaLlamaOps, RotaryForwardAndInverse) {
  TIDAL_REQUIRE_GPU();
  const DType dtype = GetParam();
  const std::int64_t B = 2, T = 37;
  const int H = 6, KV = 2;
  const ops::RopeScaling llama31{.factor = 8.0f, .low_freq_factor = 1.0f, .high_freq_factor = 4.0f,
                                 .original_max_positions = 8192};
  for (const std::int64_t hd : {16, 24, 128}) {
    SCOPED_TRACE(hd);
    const std::vector<float> inv_freq = ops::rotary_inverse_frequencies(hd, 500000.0, llama31);
    Tensor cos = Tensor::empty({T, hd / 2}), sin = Tensor::empty({T, hd / 2});
    ops::rotary_tables(cos, sin, inv_freq, 5);
    Tensor gcos = to_gpu(cos), gsin = to_gpu(sin);
    // Each token's own row of the tables (packed documents restart positions): row (7 t) % T.
    Tensor positions = Tensor::empty({B, T}, DType::i32);
    for (std::int64_t i = 0; i < B * T; ++i) positions.data<std::int32_t>()[i] = std::int32_t(7 * i % T);
    const Tensor gpositions = to_gpu(positions);
    for (bool inverse : {false, true})
      for (bool by_token : {false, true}) {
        const ops::RotaryOptions opt{
            .n_head = H, .n_kv_head = KV, .inverse = inverse, .positions = by_token ? &positions : nullptr};
        const ops::RotaryOptions gopt{
            .n_head = H, .n_kv_head = KV, .inverse = inverse, .positions = by_token ? &gpositions : nullptr};
        Tensor qkv = randn_as({B, T, (H + 2 * KV) * hd}, 5, dtype);
        Tensor gqkv = to_gpu(qkv);
        ops::rotary_apply(qkv, cos, sin, opt);
        ops::rotary_apply(gqkv, gcos, gsin, gopt);
        EXPECT_TRUE(all_close(gqkv, qkv, kernel_tolerance(dtype))) << "inverse " << inverse << " by token " << by_token;
      }
  }
}

TEST_P(CudaLlamaOps, SwiGluForwardAndBackward) {
  TIDAL_REQUIRE_GPU();
  const DType dtype = GetParam();
  const std::int64_t N = 37, I = 101;
  Tensor gu32 = randn({N, 2 * I}, 6, 3.0f);
  // Gates far into both tails: neither backend's exponential may overflow into a NaN.
  const float tails[] = {-100.0f, -30.0f, 30.0f, 100.0f};
  for (int k = 0; k < 4; ++k) gu32.data<float>()[k] = tails[k];
  Tensor gate_up = gu32;
  if (dtype != DType::f32) {
    gate_up = Tensor::empty({N, 2 * I}, dtype);
    ops::cast(gate_up, gu32);
  }
  Tensor dy = randn_as({N, I}, 7, dtype);
  Tensor y = Tensor::empty({N, I}, dtype), d = Tensor::empty({N, 2 * I}, dtype);
  ops::swiglu_forward(y, gate_up);
  ops::swiglu_backward(d, dy, gate_up);
  Tensor ggu = to_gpu(gate_up), gdy = to_gpu(dy), gy = gpu_empty({N, I}, dtype), gd = gpu_empty({N, 2 * I}, dtype);
  ops::swiglu_forward(gy, ggu);
  ops::swiglu_backward(gd, gdy, ggu);
  EXPECT_TRUE(all_close(gy, y, kernel_tolerance(dtype)));
  EXPECT_TRUE(all_close(gd, d, kernel_tolerance(dtype)));
}

TEST_P(CudaLlamaOps, EmptyInputsAreNoOps) {
  TIDAL_REQUIRE_GPU();
  const DType dtype = GetParam();
  Tensor x = gpu_empty({0, 96}, dtype), y = gpu_empty({0, 96}, dtype), rstd = gpu_empty({0});
  Tensor w = to_gpu(randn({96}, 8)), dw = to_gpu(Tensor::zeros({96}));
  ops::rms_norm_forward(y, rstd, x, w, 1e-5f);
  ops::rms_norm_backward(y, dw, x, x, w, rstd);
  Tensor gu = gpu_empty({0, 192}, dtype), h = gpu_empty({0, 96}, dtype);
  ops::swiglu_forward(h, gu);
  ops::swiglu_backward(gu, h, gu);
  EXPECT_TRUE(all_close(dw, Tensor::zeros({96}), {0, 0}));
}

INSTANTIATE_TEST_SUITE_P(Storage, CudaLlamaOps, ::testing::Values(DType::f32, DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace tidal
