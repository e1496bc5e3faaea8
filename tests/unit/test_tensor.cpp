// Tensor views, slicing, reshape and the allocators' byte accounting.
#include "core/tensor.h"

#include <gtest/gtest.h>

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
