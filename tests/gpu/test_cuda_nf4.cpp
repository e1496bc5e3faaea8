// NF4 dequantization on the GPU (ops/cuda/nf4.cu) against the CPU backend on the same codes:
// fp32, bf16 and fp16 outputs bitwise (both compute NF4[code] x absmax in fp32 and round once), on
// a size that ends in a partial block and a half byte.
#include "ops/nf4.h"
#include "support/gpu.h"
#include "support/random.h"

#include <gtest/gtest.h>

#include <cstring>

namespace tidal {
namespace {

TEST(CudaNf4, DequantizeAgainstTheCpu) {
  TIDAL_REQUIRE_GPU();
  const Tensor x = testing::randn({257, 131}, 5, 0.03f);
  const ops::Nf4Weight host = ops::nf4_quantize(x);
  const ops::Nf4Weight device = host.to(gpu_allocator());
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    Tensor expected = Tensor::empty(x.shape(), dtype), got = testing::gpu_empty(x.shape(), dtype);
    ops::nf4_dequantize(expected, host);
    ops::nf4_dequantize(got, device);
    const Tensor back = testing::to_host(got);
    EXPECT_EQ(std::memcmp(back.raw(), expected.raw(), expected.nbytes()), 0) << dtype_name(dtype);
    // A block crossing rows and NF4's blocks of 64 (nn/linear.cpp's tiles).
    Tensor block = Tensor::empty({100, 70}, dtype), got_block = testing::gpu_empty({100, 70}, dtype);
    ops::nf4_dequantize(block, host, {.first_row = 150, .first_col = 61});
    ops::nf4_dequantize(got_block, device, {.first_row = 150, .first_col = 61});
    const Tensor back_block = testing::to_host(got_block);
    EXPECT_EQ(std::memcmp(back_block.raw(), block.raw(), block.nbytes()), 0) << dtype_name(dtype);
  }
}

}  // namespace
}  // namespace tidal
