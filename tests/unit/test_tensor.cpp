// Tensor views, slicing, reshape and the allocators' byte accounting.
#include "core/tensor.h"

#include <gtest/gtest.h>

#include <cstring>

namespace tidal {

TEST(Tensor, ViewsShareStorage) {
  Tensor t = Tensor::zeros({4, 6});
  Tensor rows = t.slice(0, 1, 3);
  EXPECT_EQ(rows.shape(), Shape({2, 6}));
  EXPECT_TRUE(rows.is_contiguous());
  rows.data<float>()[0] = 5.0f;
  EXPECT_EQ(t.data<float>()[6], 5.0f);
  Tensor cols = t.slice(1, 2, 4);
  EXPECT_FALSE(cols.is_contiguous());
  EXPECT_EQ(cols.raw(), t.data<float>() + 2);
  Tensor r = t.reshape({-1, 3});
  EXPECT_EQ(r.shape(), Shape({8, 3}));
  EXPECT_EQ(r.raw(), t.raw());
}

TEST(Tensor, HostLoopsUseHostTensorsInPlace) {
  // on_host / from_host / host_side give a host loop the tensor itself on the CPU (no copies, and
  // its temporaries from the step's pool); test_cuda_core checks the copies of GPU tensors.
  Tensor t = Tensor::full({5}, 2.0f);
  Tensor here = on_host(t);
  EXPECT_EQ(here.raw(), t.raw());
  EXPECT_EQ(on_host(t, false).raw(), t.raw());
  here.data<float>()[1] = 7.0f;
  from_host(t, here);
  EXPECT_EQ(t.data<float>()[1], 7.0f);
  HostAllocator pool;
  EXPECT_EQ(&host_side(t, pool), &pool);
  EXPECT_EQ(&host_side(t), &default_allocator());
}

TEST(Tensor, ForeignMemoryIsNotOwned) {
  float buffer[6] = {1, 2, 3, 4, 5, 6};
  Tensor v = Tensor::view_of(buffer, {2, 3}, DType::f32);
  EXPECT_FALSE(v.owns_storage());
  EXPECT_EQ(v.data<float>()[4], 5.0f);
  Tensor c = v.clone();
  EXPECT_TRUE(c.owns_storage());
  EXPECT_EQ(c.data<float>()[5], 6.0f);
}

TEST(Tensor, LargeHostCopiesAndZerosReachEveryByte) {
  // From 1 MiB on, host copies and zeroing are split over the threads (core/gpu.cpp): a share
  // lost or overlapping at a boundary shows here. Sizes not multiples of a cache line.
  const auto pattern = [](Tensor& t) {
    auto* p = static_cast<unsigned char*>(t.raw());
    for (std::size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>(i * 131 + i / 251);
  };
  Tensor a = Tensor::empty({(1 << 20) + 4099}, DType::u8), b = Tensor::zeros(a.shape(), DType::u8);
  pattern(a);
  b.copy_from(a);
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);
  // Rows of a column slice: 600 runs of 1999 bytes, 1.1 MiB in all.
  Tensor wide = Tensor::empty({600, 2000}, DType::u8);
  pattern(wide);
  const Tensor cols = wide.slice(1, 1, 2000);
  Tensor packed = Tensor::empty({600, 1999}, DType::u8);
  packed.copy_from(cols);
  for (std::int64_t r = 0; r < 600; ++r)
    ASSERT_EQ(std::memcmp(static_cast<const unsigned char*>(packed.raw()) + r * 1999,
                          static_cast<const unsigned char*>(wide.raw()) + r * 2000 + 1, 1999),
              0)
        << "row " << r;
  pattern(b);
  b.zero_();
  const auto* z = static_cast<const unsigned char*>(b.raw());
  std::size_t nonzero = 0;
  for (std::size_t i = 0; i < b.nbytes(); ++i) nonzero += z[i] != 0;
  EXPECT_EQ(nonzero, 0u);
}

TEST(Tensor, WrongTypeAccessIsAnInternalError) {
  Tensor t = Tensor::zeros({3}, DType::bf16);
  EXPECT_THROW(t.data<float>(), InternalError);
  EXPECT_THROW(t.reshape({4}), InternalError);
}

TEST(Allocator, CountsCurrentAndPeakAndEnforcesCapacity) {
  HostAllocator tier(MemoryTier::device, 1000);
  {
    Tensor a = Tensor::empty({100}, DType::f32, tier);  // 400 bytes
    {
      Tensor b = Tensor::empty({100}, DType::bf16, tier);  // 200 bytes
      EXPECT_EQ(tier.current_bytes(), 600u);
    }
    EXPECT_EQ(tier.current_bytes(), 400u);
    EXPECT_EQ(tier.peak_bytes(), 600u);
    EXPECT_THROW(Tensor::empty({200}, DType::f32, tier), OutOfMemory);
    EXPECT_EQ(tier.current_bytes(), 400u);
  }
  EXPECT_EQ(tier.current_bytes(), 0u);
  tier.reset_peak();
  EXPECT_EQ(tier.peak_bytes(), 0u);
}

}  // namespace tidal
