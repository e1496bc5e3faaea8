// Row-wise op families on the GPU against the CPU backend on the same inputs: layernorm, softmax,
// cross-entropy, token and position embeddings; forward and backward, fp32 and the 16-bit
// storage types where the CPU supports them, on odd shapes. Also: the ops' user errors (ids and
// targets out of range), bitwise reproducibility of the reductions over rows, and empty inputs.
#include "core/error.h"
#include "ops/cast.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "ops/layernorm.h"
#include "ops/softmax.h"
#include "support/gpu.h"
#include "support/random.h"
#include "support/tolerance.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>

namespace tidal {
namespace {

using testing::all_close;
using testing::randint;
using testing::randn;
using testing::randn_as;
using testing::gpu_empty;
using testing::to_gpu;
using testing::to_host;
using testing::Tolerance;

// Reductions over a row or a column (mean, variance, sums of exponentials, dw/db): the CPU adds
// sequentially, the GPU in a tree, so fp32 results differ by summation order only.
constexpr Tolerance kFp32Sums = testing::kFp32;  // {1e-5, 1e-4}
// A 16-bit output computed in fp32 from the same inputs: the fp32 values differ by summation
// order (the atol covers that where the output is near zero), and the rounding to 16 bits may
// then flip by one ulp: 2^-7 relative at worst for bf16, 2^-10 for fp16.
constexpr Tolerance kBf16Sums{1e-5, 8e-3};
constexpr Tolerance kF16Sums{1e-5, 1e-3};
// Cross-entropy backward is elementwise given the same lse: expf against std::exp only, a few
// fp32 ulps (<= 4e-7 relative), no reduction. The probabilities are ~1e-5 (V = 50257), so the
// atol stays far below them. fp16 stores such values as subnormals, spaced 6e-8 apart.
constexpr Tolerance kFp32Exp{1e-9, 1e-5};
constexpr Tolerance kBf16Exp{1e-9, 8e-3};
constexpr Tolerance kF16Exp{1e-7, 1e-3};
// Embedding gathers and scatter-adds: the GPU adds in the CPU's order (tokens by position, the
// batch by index) in fp32 and rounds once, so results agree bit for bit.
constexpr Tolerance kExact{0, 0};

Tolerance sums_tolerance(DType dtype) {
  return dtype == DType::f32 ? kFp32Sums : dtype == DType::bf16 ? kBf16Sums : kF16Sums;
}

Tolerance exp_tolerance(DType dtype) {
  return dtype == DType::f32 ? kFp32Exp : dtype == DType::bf16 ? kBf16Exp : kF16Exp;
}



::testing::AssertionResult bitwise_equal(const Tensor& a, const Tensor& b) {
  const Tensor ha = to_host(a), hb = to_host(b);
  if (ha.shape() != hb.shape() || ha.dtype() != hb.dtype()) return ::testing::AssertionFailure() << "shape or dtype";
  if (std::memcmp(ha.raw(), hb.raw(), ha.nbytes()) != 0) return ::testing::AssertionFailure() << "bits differ";
  return ::testing::AssertionSuccess();
}

class CudaRows : public ::testing::TestWithParam<DType> {};

// ---- layernorm ----

TEST_P(CudaRows, LayerNormForwardAndBackward) {
  TIDAL_REQUIRE_GPU();
  const DType dtype = GetParam();
  // 1000 rows: several chunks of the dw/db partial sums, the last one short. Widths 768 and 1032
  // (multiples of 8) take the kernels' 16-byte accesses; 771 and 129 one element an access.
  for (const Shape& shape : {Shape{37, 771}, Shape{1000, 129}, Shape{3, 13, 129}, Shape{64, 768}, Shape{5, 1032}}) {
    SCOPED_TRACE(shape.str());
    const std::int64_t C = shape.dim(-1), N = shape.numel() / C;
    Tensor x = randn_as(shape, 1, dtype, 2.0f), w = randn_as({C}, 2, dtype), b = randn_as({C}, 3, dtype);
    Tensor y = Tensor::empty(shape, dtype), mean = Tensor::empty({N}), rstd = Tensor::empty({N});
    ops::layernorm_forward(y, mean, rstd, x, w, b, 1e-5f);
    Tensor gx = to_gpu(x), gw = to_gpu(w), gb = to_gpu(b);
    Tensor gy = gpu_empty(shape, dtype), gmean = gpu_empty({N}), grstd = gpu_empty({N});
    ops::layernorm_forward(gy, gmean, grstd, gx, gw, gb, 1e-5f);
    EXPECT_TRUE(all_close(gy, y, sums_tolerance(dtype)));
    EXPECT_TRUE(all_close(gmean, mean, kFp32Sums));
    EXPECT_TRUE(all_close(grstd, rstd, kFp32Sums));

    // Backward from the CPU's mean and rstd; dw and db start non-zero (they accumulate).
    Tensor dy = randn_as(shape, 4, dtype), dw = randn_as({C}, 5, dtype), db = randn_as({C}, 6, dtype);
    Tensor gdw = to_gpu(dw), gdb = to_gpu(db), gdy = to_gpu(dy);
    Tensor dx = Tensor::empty(shape, dtype), gdx = gpu_empty(shape, dtype);
    ops::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd);
    ops::layernorm_backward(gdx, gdw, gdb, gdy, gx, gw, to_gpu(mean), to_gpu(rstd));
    EXPECT_TRUE(all_close(gdx, dx, sums_tolerance(dtype)));
    EXPECT_TRUE(all_close(gdw, dw, sums_tolerance(dtype)));
    EXPECT_TRUE(all_close(gdb, db, sums_tolerance(dtype)));
  }
}

TEST_P(CudaRows, LayerNormIsBitwiseReproducible) {
  TIDAL_REQUIRE_GPU();
  const DType dtype = GetParam();
  const Shape shape{2049, 771};
  const std::int64_t C = 771, N = 2049;
  Tensor gx = to_gpu(randn_as(shape, 7, dtype)), gw = to_gpu(randn_as({C}, 8, dtype));
  Tensor gb = to_gpu(randn_as({C}, 9, dtype)), gdy = to_gpu(randn_as(shape, 10, dtype));
  Tensor dw0 = randn_as({C}, 11, dtype), db0 = randn_as({C}, 12, dtype);
  Tensor y[2], mean[2], rstd[2], dx[2], dw[2], db[2];
  for (int run = 0; run < 2; ++run) {
    y[run] = gpu_empty(shape, dtype);
    mean[run] = gpu_empty({N});
    rstd[run] = gpu_empty({N});
    dx[run] = gpu_empty(shape, dtype);
    dw[run] = to_gpu(dw0);
    db[run] = to_gpu(db0);
    ops::layernorm_forward(y[run], mean[run], rstd[run], gx, gw, gb, 1e-5f);
    ops::layernorm_backward(dx[run], dw[run], db[run], gdy, gx, gw, mean[run], rstd[run]);
  }
  EXPECT_TRUE(bitwise_equal(y[0], y[1]));
  EXPECT_TRUE(bitwise_equal(mean[0], mean[1]));
  EXPECT_TRUE(bitwise_equal(rstd[0], rstd[1]));
  EXPECT_TRUE(bitwise_equal(dx[0], dx[1]));
  EXPECT_TRUE(bitwise_equal(dw[0], dw[1]));
  EXPECT_TRUE(bitwise_equal(db[0], db[1]));
}

// ---- cross-entropy ----

TEST_P(CudaRows, CrossEntropyForwardAndBackward) {
  TIDAL_REQUIRE_GPU();
  const DType dtype = GetParam();
  const std::int64_t N = 37;
  // 50304 (GPT-2's vocabulary padded to a multiple of 128): the kernels' 16-byte accesses.
  for (const std::int64_t V : {std::int64_t(1001), std::int64_t(50257), std::int64_t(50304)}) {
    SCOPED_TRACE("V = " + std::to_string(V));
    Tensor logits = randn_as({N, V}, 20, dtype, 2.0f);
    Tensor targets = randint({N}, 21, 0, std::int32_t(V));
    std::int32_t* t = targets.data<std::int32_t>();
    t[3] = t[17] = t[36] = ops::kIgnoreIndex;
    t[5] = t[29] = ops::kTargetElsewhere;
    t[7] = 0;
    t[8] = std::int32_t(V - 1);
    Tensor losses = Tensor::empty({N}), lse = Tensor::empty({N});
    ops::cross_entropy_forward(losses, lse, logits, targets);
    Tensor glogits = to_gpu(logits), gtargets = to_gpu(targets);
    Tensor glosses = gpu_empty({N}), glse = gpu_empty({N});
    ops::cross_entropy_forward(glosses, glse, glogits, gtargets);
    // fp32 outputs from the same logits: summation order only, whatever the logits' dtype.
    EXPECT_TRUE(all_close(glosses, losses, kFp32Sums));
    EXPECT_TRUE(all_close(glse, lse, kFp32Sums));

    const float scale = 0.5f / 32.0f;  // dloss / valid rows, with a dloss != 1
    Tensor dlogits = Tensor::empty({N, V}, dtype), gdlogits = gpu_empty({N, V}, dtype);
    ops::cross_entropy_backward(dlogits, logits, lse, targets, scale);
    ops::cross_entropy_backward(gdlogits, glogits, to_gpu(lse), gtargets, scale);
    EXPECT_TRUE(all_close(gdlogits, dlogits, exp_tolerance(dtype)));
  }
}

TEST(CudaRowsErrors, CrossEntropyRejectsTargetsOutsideTheClasses) {
  TIDAL_REQUIRE_GPU();
  const std::int64_t N = 37, V = 1001;
  Tensor targets = randint({N}, 22, 0, std::int32_t(V));
  targets.data<std::int32_t>()[11] = std::int32_t(V);
  targets.data<std::int32_t>()[30] = -1;
  Tensor glosses = gpu_empty({N}), glse = gpu_empty({N});
  try {
    ops::cross_entropy_forward(glosses, glse, to_gpu(randn({N, V}, 23)), to_gpu(targets));
    ADD_FAILURE() << "no error for target 1001 of 1001 classes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("target 1001 at position 11"), std::string::npos) << e.what();
  }
}

// ---- softmax (fp32 only, as the CPU) ----

TEST(CudaRowsF32, SoftmaxForwardAndBackward) {
  TIDAL_REQUIRE_GPU();
  for (const Shape& shape : {Shape{37, 129}, Shape{5, 7, 1001}}) {
    SCOPED_TRACE(shape.str());
    const std::int64_t C = shape.dim(-1);
    Tensor x = randn(shape, 30, 3.0f);
    float* px = x.data<float>();
    for (std::int64_t c = 0; c < C; ++c) px[c] = -std::numeric_limits<float>::infinity();  // all masked: zeros
    for (std::int64_t c = 0; c < C; c += 3) px[C + c] = -std::numeric_limits<float>::infinity();
    Tensor y = Tensor::empty(shape), gy = gpu_empty(shape);
    ops::softmax_forward(y, x);
    ops::softmax_forward(gy, to_gpu(x));
    EXPECT_TRUE(all_close(gy, y, kFp32Sums));

    Tensor dy = randn(shape, 31), dx = Tensor::empty(shape), gdx = gpu_empty(shape);
    ops::softmax_backward(dx, dy, y);
    ops::softmax_backward(gdx, to_gpu(dy), to_gpu(y));
    EXPECT_TRUE(all_close(gdx, dx, kFp32Sums));
  }
}

// ---- embeddings ----

TEST_P(CudaRows, EmbeddingForwardAndBackward) {
  TIDAL_REQUIRE_GPU();
  const DType dtype = GetParam();
  const std::int64_t B = 3, T = 37, V = 101, C = 771;
  Tensor table = randn_as({V, C}, 40, dtype);
  // Ids from a few rows only (many repeats), the ends of the table, and rows held elsewhere.
  Tensor ids = randint({B, T}, 41, 0, 7);
  std::int32_t* pid = ids.data<std::int32_t>();
  pid[4] = pid[50] = std::int32_t(V - 1);
  pid[9] = pid[10] = pid[100] = ops::kIdElsewhere;
  Tensor gtable = to_gpu(table), gids = to_gpu(ids);

  Tensor y = Tensor::empty({B, T, C}, dtype), gy = gpu_empty({B, T, C}, dtype);
  ops::embedding_forward(y, ids, table);
  ops::embedding_forward(gy, gids, gtable);
  EXPECT_TRUE(all_close(gy, y, kExact));

  Tensor acc = randn_as({B, T, C}, 42, dtype), gacc = to_gpu(acc);
  ops::embedding_forward(acc, ids, table, /*accumulate=*/true);
  ops::embedding_forward(gacc, gids, gtable, /*accumulate=*/true);
  EXPECT_TRUE(all_close(gacc, acc, kExact));

  Tensor dy = randn_as({B, T, C}, 43, dtype), dtable = randn_as({V, C}, 44, dtype), gdtable = to_gpu(dtable);
  Tensor gdy = to_gpu(dy);
  ops::embedding_backward(dtable, dy, ids);
  ops::embedding_backward(gdtable, gdy, gids);
  EXPECT_TRUE(all_close(gdtable, dtable, kExact));

  // Reproducible: a second run from the same starting gradient gives the same bits.
  Tensor again = to_gpu(randn_as({V, C}, 44, dtype));
  ops::embedding_backward(again, gdy, gids);
  EXPECT_TRUE(bitwise_equal(again, gdtable));
}

TEST_P(CudaRows, EmbeddingBackwardOfOneIdRepeatedEverywhere) {
  TIDAL_REQUIRE_GPU();
  const DType dtype = GetParam();
  // 2003 tokens of id 5 (a padding token, say) and one of id 0: a run far longer than the
  // kernel's unrolled step, with a ragged tail.
  const std::int64_t N = 2004, V = 13, C = 129;
  Tensor ids_i32 = Tensor::empty({N}, DType::i32);
  for (std::int64_t n = 0; n < N; ++n) ids_i32.data<std::int32_t>()[n] = n == 1000 ? 0 : 5;
  Tensor dy = randn_as({N, C}, 50, dtype), dtable = randn_as({V, C}, 51, dtype), gdtable = to_gpu(dtable);
  ops::embedding_backward(dtable, dy, ids_i32);
  ops::embedding_backward(gdtable, to_gpu(dy), to_gpu(ids_i32));
  EXPECT_TRUE(all_close(gdtable, dtable, kExact));
}

TEST(CudaRowsErrors, EmbeddingRejectsIdsOutsideTheTable) {
  TIDAL_REQUIRE_GPU();
  const std::int64_t N = 37, V = 101, C = 129;
  Tensor ids = randint({N}, 52, 0, std::int32_t(V));
  ids.data<std::int32_t>()[23] = std::int32_t(V);
  ids.data<std::int32_t>()[31] = -3;
  Tensor gy = gpu_empty({N, C});
  try {
    ops::embedding_forward(gy, to_gpu(ids), to_gpu(randn({V, C}, 53)));
    ADD_FAILURE() << "no error for id 101 of 101 rows";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 101 at position 23"), std::string::npos) << e.what();
  }
}

TEST_P(CudaRows, PositionEmbeddingForwardAndBackward) {
  TIDAL_REQUIRE_GPU();
  const DType dtype = GetParam();
  const std::int64_t B = 3, T = 37, C = 129, positions = 50, first = 5;
  Tensor table = randn_as({positions, C}, 60, dtype);
  Tensor y = randn_as({B, T, C}, 61, dtype), gy = to_gpu(y);
  ops::position_embedding_forward(y, table, first);
  ops::position_embedding_forward(gy, to_gpu(table), first);
  EXPECT_TRUE(all_close(gy, y, kExact));

  Tensor dy = randn_as({B, T, C}, 62, dtype), dtable = randn_as({positions, C}, 63, dtype);
  Tensor gdtable = to_gpu(dtable);
  ops::position_embedding_backward(dtable, dy, first);
  ops::position_embedding_backward(gdtable, to_gpu(dy), first);
  EXPECT_TRUE(all_close(gdtable, dtable, kExact));

  EXPECT_THROW(ops::position_embedding_forward(gy, to_gpu(table), positions - T + 1), Error);
}

// ---- empty inputs launch nothing ----

TEST(CudaRowsF32, EmptyInputsAreNoOps) {
  TIDAL_REQUIRE_GPU();
  Tensor x = gpu_empty({0, 129}), w = gpu_empty({129}), none = gpu_empty({0});
  Tensor y = gpu_empty({0, 129}), dw = gpu_empty({129}), db = gpu_empty({129});
  ops::layernorm_forward(y, none, none, x, w, w, 1e-5f);
  ops::layernorm_backward(y, dw, db, x, x, w, none, none);
  ops::softmax_forward(y, x);
  ops::softmax_backward(y, x, x);
  Tensor targets = gpu_empty({0}, DType::i32);
  ops::cross_entropy_forward(none, none, x, targets);
  ops::cross_entropy_backward(y, x, none, targets, 1.0f);
  Tensor table = gpu_empty({7, 129}), out = gpu_empty({0, 129});
  ops::embedding_forward(out, targets, table);
  ops::embedding_backward(table, out, targets);
  synchronize_gpu();
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaRows, ::testing::Values(DType::f32, DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace tidal
