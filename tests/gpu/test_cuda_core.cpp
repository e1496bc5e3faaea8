// The GPU's tiers and byte moves: counting allocators (device pool, pinned host), host <-> device
// copies of contiguous and strided tensors, fill / zero / item on GPU tensors, the staged
// collectives' fenced copies and a staged all-reduce of GPU tensors. Exact answers.
#include "comm/self_communicator.h"
#include "comm/staged_communicator.h"
#include "core/gpu.h"
#include "support/gpu.h"
#include "support/random.h"
#include "support/tolerance.h"

#include <gtest/gtest.h>

namespace tidal {
namespace {

using testing::to_gpu;
using testing::to_host;

TEST(CudaCore, DeviceAllocatorCountsCurrentAndPeak) {
  TIDAL_REQUIRE_GPU();
  Allocator& gpu = gpu_allocator();
  EXPECT_EQ(gpu.tier(), MemoryTier::device);
  EXPECT_TRUE(gpu.device().is_cuda());
  const std::size_t before = gpu.current_bytes();
  gpu.reset_peak();
  {
    Tensor a = Tensor::empty({1000, 37}, DType::f32, gpu);
    Tensor b = Tensor::empty({513}, DType::bf16, gpu);
    EXPECT_TRUE(a.device().is_cuda());
    EXPECT_EQ(gpu.current_bytes(), before + 1000 * 37 * 4 + 513 * 2);
  }
  EXPECT_EQ(gpu.current_bytes(), before);
  EXPECT_EQ(gpu.peak_bytes(), before + 1000 * 37 * 4 + 513 * 2);
}

TEST(CudaCore, DeviceCapacityIsABudget) {
  TIDAL_REQUIRE_GPU();
  Allocator& gpu = gpu_allocator();
  const std::size_t old = gpu.capacity();
  gpu.set_capacity(gpu.current_bytes() + 4096);
  EXPECT_THROW(Tensor::empty({2048}, DType::f32, gpu), OutOfMemory);
  gpu.set_capacity(old);
}

TEST(CudaCore, PinnedHostMemoryReusesBlocks) {
  TIDAL_REQUIRE_GPU();
  Allocator& pinned = pinned_host_allocator();
  EXPECT_EQ(pinned.tier(), MemoryTier::host_pinned);
  void* first = nullptr;
  {
    Tensor t = Tensor::empty({4096}, DType::f32, pinned);
    first = t.raw();
    t.fill_(3.0f);  // host memory: written by the CPU
    EXPECT_EQ(t.data<float>()[4095], 3.0f);
  }
  Tensor again = Tensor::empty({4096}, DType::f32, pinned);
  EXPECT_EQ(again.raw(), first);
}

TEST(CudaCore, RoundTripsContiguousTensorsBitwise) {
  TIDAL_REQUIRE_GPU();
  for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::i32}) {
    Tensor host = Tensor::empty({7, 129}, dtype);
    auto* bytes = static_cast<unsigned char*>(host.raw());
    for (std::size_t i = 0; i < host.nbytes(); ++i) bytes[i] = static_cast<unsigned char>(i * 7 + 3);
    Tensor back = to_host(to_gpu(host));
    EXPECT_EQ(std::memcmp(back.raw(), host.raw(), host.nbytes()), 0) << dtype_name(dtype);
  }
}

TEST(CudaCore, HostLoopsGetCopiesOfGpuTensors) {
  // on_host copies a GPU tensor to host memory (or only shapes one), from_host copies it back,
  // and a host loop's temporaries beside a GPU tensor come from the host's allocator.
  TIDAL_REQUIRE_GPU();
  Tensor host = Tensor::empty({3, 5});
  for (int i = 0; i < 15; ++i) host.data<float>()[i] = float(i);
  Tensor gpu = to_gpu(host);
  Tensor here = on_host(gpu);
  ASSERT_TRUE(here.device().is_cpu());
  EXPECT_EQ(std::memcmp(here.raw(), host.raw(), host.nbytes()), 0);
  Tensor shaped = on_host(gpu, false);
  EXPECT_TRUE(shaped.device().is_cpu());
  EXPECT_EQ(shaped.shape(), gpu.shape());
  here.data<float>()[4] = -1.0f;
  from_host(gpu, here);
  EXPECT_EQ(to_host(gpu).data<float>()[4], -1.0f);
  EXPECT_EQ(&host_side(gpu), &host_allocator());
}

TEST(CudaCore, CopiesStridedSlicesBothWays) {
  TIDAL_REQUIRE_GPU();
  Tensor host = testing::randn({5, 6, 11}, 1);
  Tensor gpu = to_gpu(host);
  // A slice of the middle dimension: rows of 11 contiguous floats at a pitch of 66.
  Tensor down = Tensor::empty({5, 2, 11});
  down.copy_from(gpu.slice(1, 3, 5));
  Tensor want = Tensor::empty({5, 2, 11});
  want.copy_from(host.slice(1, 3, 5));
  EXPECT_TRUE(testing::all_close(down, want, {0, 0}));
  // And back up, into a slice of a GPU tensor.
  Tensor target = Tensor::zeros({5, 6, 11}, DType::f32, gpu_allocator());
  target.slice(1, 1, 3).copy_from(down);
  Tensor expect = Tensor::zeros({5, 6, 11});
  expect.slice(1, 1, 3).copy_from(want);
  EXPECT_TRUE(testing::all_close(target, expect, {0, 0}));
}

TEST(CudaCore, FillZeroAndItem) {
  TIDAL_REQUIRE_GPU();
  Tensor t = Tensor::full({1025}, 2.5f, gpu_allocator());
  Tensor host = to_host(t);
  for (std::int64_t i = 0; i < host.numel(); ++i) ASSERT_EQ(host.data<float>()[i], 2.5f) << i;
  t.zero_();
  EXPECT_EQ(t.slice(0, 1024, 1025).item(), 0.0f);
  EXPECT_EQ(Tensor::full({1}, -7.0f, gpu_allocator()).item(), -7.0f);
}

TEST(CudaCore, FencedCopiesFollowTheComputeStreamBothWays) {
  TIDAL_REQUIRE_GPU();
  const std::int64_t n = 1 << 22;  // 16 MiB: the fill is still queued when the copy out is
  Tensor gpu = Tensor::zeros({n}, DType::f32, gpu_allocator());
  gpu.fill_(4.0f);  // queued on the compute stream; the copy out must wait for it
  Tensor host = Tensor::empty({n}, DType::f32, pinned_host_allocator());
  const GpuFence out = copy_to_host_behind_compute(host.raw(), gpu.raw(), gpu.nbytes());
  out.wait();
  EXPECT_TRUE(out.passed());
  EXPECT_EQ(host.data<float>()[0], 4.0f);
  EXPECT_EQ(host.data<float>()[n - 1], 4.0f);
  host.fill_(-1.5f);
  const GpuFence back = copy_to_device_on_compute(gpu.raw(), host.raw(), gpu.nbytes());
  EXPECT_EQ(gpu.slice(0, n - 1, n).item(), -1.5f) << "a later read on the compute stream sees the copy";
  EXPECT_TRUE(back.passed());
  EXPECT_TRUE(GpuFence().passed());
}

TEST(CudaCore, StagedCollectivesOfGpuTensorsComeBack) {
  TIDAL_REQUIRE_GPU();
  auto staging = std::shared_ptr<comm::Staging>(comm::gpu_staging());
  comm::StagedCommunicator staged(std::make_shared<comm::SelfCommunicator>("data"), staging);
  Tensor a = Tensor::full({1000}, 2.0f, gpu_allocator()), b = Tensor::full({3}, 5.0f, gpu_allocator());
  comm::WorkPtr wa = staged.all_reduce(a), wb = staged.all_reduce(b, {.op = comm::ReduceOp::max});
  wa->wait();
  wb->wait();
  EXPECT_EQ(a.slice(0, 999, 1000).item(), 2.0f);
  EXPECT_EQ(b.slice(0, 2, 3).item(), 5.0f);
  Tensor all = Tensor::zeros({4}, DType::f32, gpu_allocator());
  staged.all_gather(all, Tensor::full({4}, 7.0f, gpu_allocator()))->wait();  // `in` a temporary
  EXPECT_EQ(all.slice(0, 3, 4).item(), 7.0f);
}

}  // namespace
}  // namespace tidal
