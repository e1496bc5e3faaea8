// A mixture of experts' row moves on the GPU (ops/expert_rows.h) against the CPU backend on the
// same inputs, fp32 and bf16, with padding rows (index -1), dropped picks (slot -1) and empty
// batches: gather and combine add their few terms in the CPU's order in fp32 and round once (equal
// bit for bit); a slot's dot product is a warp's tree against the CPU's sequential sum.
#include "ops/cast.h"
#include "ops/expert_rows.h"
#include "support/gpu.h"
#include "support/random.h"
#include "support/tolerance.h"

#include <gtest/gtest.h>

namespace tidal {
namespace {

using testing::all_close;
using testing::randn_as;
using testing::to_gpu;
using testing::to_host;

void check(DType dtype) {
  constexpr std::int64_t N = 37, P = 53, C = 130, K = 3;
  const Tensor x = randn_as({N, C}, 61, dtype), src = randn_as({P, C}, 62, dtype);
  const Tensor w = testing::randn({N, K}, 63), s = testing::randn({P}, 64);
  Tensor rows = Tensor::empty({P}, DType::i32), slots = Tensor::empty({N, K}, DType::i32);
  for (std::int64_t p = 0; p < P; ++p) rows.data<std::int32_t>()[p] = p % 9 == 8 ? -1 : std::int32_t((7 * p) % N);
  for (std::int64_t i = 0; i < N * K; ++i) slots.data<std::int32_t>()[i] = i % 11 == 5 ? -1 : std::int32_t((5 * i + 2) % P);
  Tensor g = Tensor::empty({P, C}, dtype), c = Tensor::empty({N, C}, dtype), d = Tensor::empty({N, K});
  ops::gather_rows(g, x, rows, s);
  ops::combine_rows(c, src, slots, w);
  ops::slot_dots(d, x, src, slots);
  Tensor gg = testing::gpu_empty({P, C}, dtype), gc = testing::gpu_empty({N, C}, dtype), gd = testing::gpu_empty({N, K});
  ops::gather_rows(gg, to_gpu(x), to_gpu(rows), to_gpu(s));
  ops::combine_rows(gc, to_gpu(src), to_gpu(slots), to_gpu(w));
  ops::slot_dots(gd, to_gpu(x), to_gpu(src), to_gpu(slots));
  EXPECT_TRUE(all_close(to_host(gg), g, {0, 0})) << "gather_rows " << dtype_name(dtype);
  // combine: fp32 fma on the GPU against separate multiply-adds on the CPU: an ulp of the sum.
  EXPECT_TRUE(all_close(to_host(gc), c, dtype == DType::f32 ? testing::Tolerance{1e-6, 1e-5}
                                                             : testing::Tolerance{1e-5, 8e-3}))
      << "combine_rows " << dtype_name(dtype);
  EXPECT_TRUE(all_close(to_host(gd), d, testing::kFp32)) << "slot_dots " << dtype_name(dtype);
  // Empty batches are no-ops.
  Tensor none = testing::gpu_empty({0, C}, dtype);
  ops::gather_rows(none, to_gpu(x), to_gpu(Tensor::empty({0}, DType::i32)));
}

TEST(CudaExpertRows, AgainstTheCpu) {
  TIDAL_REQUIRE_GPU();
  check(DType::f32);
  check(DType::bf16);
}

}  // namespace
}  // namespace tidal
