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
  }
}

}  // namespace
}  // namespace tidal
