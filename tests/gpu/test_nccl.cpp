// NcclCommunicator against closed-form answers on device tensors (fp32 / bf16 / int32, uneven
// all-gather and reduce-scatter parts), on as many ranks as the machine has GPUs (one per rank;
// a one-GPU machine runs it on one rank). Skipped, with a message, where no GPU is present.
#include "comm/mpi_runtime.h"
#include "comm/nccl_communicator.h"
#include "core/dtype.h"
#include "support/mpi.h"

#include <gtest/gtest.h>

#include <functional>

namespace tidal::comm {
namespace {

using testing::mpi;

// A device tensor that frees itself.
struct DeviceTensor {
  Tensor t;
  DeviceTensor(std::int64_t n, DType dtype) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, std::size_t(n) * dtype_size(dtype)), cudaSuccess);
    t = Tensor::view_of(p, {n}, dtype, Device::cuda(0));
  }
  ~DeviceTensor() { cudaFree(t.raw()); }
};

void upload(Tensor& dev, const std::function<double(std::int64_t)>& value) {
  Tensor host = Tensor::empty(dev.shape(), dev.dtype());
  for (std::int64_t i = 0; i < host.numel(); ++i) {
    const float v = float(value(i));
    switch (host.dtype()) {
      case DType::f32: host.data<float>()[i] = v; break;
      case DType::bf16: host.data<bf16>()[i] = to_bf16(v); break;
      case DType::f16: host.data<f16>()[i] = to_f16(v); break;
      case DType::i32: host.data<std::int32_t>()[i] = std::int32_t(v); break;
      case DType::u8: host.data<std::uint8_t>()[i] = std::uint8_t(v); break;
    }
  }
  ASSERT_EQ(cudaMemcpy(dev.raw(), host.raw(), host.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
}

void expect_values(const Tensor& dev, const std::function<double(std::int64_t)>& want, const std::string& what) {
  Tensor host = Tensor::empty(dev.shape(), dev.dtype());
  ASSERT_EQ(cudaMemcpy(host.raw(), dev.raw(), host.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  for (std::int64_t i = 0; i < host.numel(); ++i) {
    double got = 0;
    switch (host.dtype()) {
      case DType::f32: got = host.data<float>()[i]; break;
      case DType::bf16: got = to_float(host.data<bf16>()[i]); break;
      case DType::f16: got = to_float(host.data<f16>()[i]); break;
      case DType::i32: got = host.data<std::int32_t>()[i]; break;
      case DType::u8: got = host.data<std::uint8_t>()[i]; break;
    }
    ASSERT_EQ(got, want(i)) << what << " element " << i;
  }
}

class Nccl : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_SKIP() << "no CUDA device: NCCL not run";
    if (devices < mpi().local_size()) GTEST_SKIP() << devices << " GPUs for " << mpi().local_size() << " ranks";
    ASSERT_EQ(cudaSetDevice(mpi().world_rank() % devices), cudaSuccess);
    static std::shared_ptr<Communicator> host = mpi().world(Seconds(60));
    static auto nccl = std::make_shared<NcclCommunicator>(*host, mpi().world_rank() % devices, nullptr, Seconds(60));
    comm_ = nccl.get();
  }
  NcclCommunicator* comm_ = nullptr;
};

TEST_F(Nccl, AllReduceBroadcastReduce) {
  const double p = comm_->size(), r = comm_->rank();
  for (DType dt : {DType::f32, DType::bf16, DType::i32}) {
    DeviceTensor s(1003, dt);
    upload(s.t, [&](std::int64_t i) { return (r + 1) * double(i % 5 + 1); });
    comm_->all_reduce(s.t)->wait();
    expect_values(s.t, [&](std::int64_t i) { return p * (p + 1) / 2 * double(i % 5 + 1); }, "all_reduce sum");

    upload(s.t, [&](std::int64_t i) { return r * 10 + double(i % 7); });
    comm_->broadcast(s.t, {.root = int(p) - 1})->wait();
    expect_values(s.t, [&](std::int64_t i) { return (p - 1) * 10 + double(i % 7); }, "broadcast");

    upload(s.t, [&](std::int64_t i) { return r + double(i % 3); });
    comm_->reduce(s.t, {.root = 0})->wait();
    if (r == 0) expect_values(s.t, [&](std::int64_t i) { return p * (p - 1) / 2 + p * double(i % 3); }, "reduce");
  }
}

TEST_F(Nccl, AllGatherAndReduceScatterUnevenParts) {
  const int p = comm_->size(), r = comm_->rank();
  const std::int64_t total = 2 * p + 1;
  const auto counts = split_counts(total, p);
  std::int64_t first = 0;
  for (int k = 0; k < r; ++k) first += counts[std::size_t(k)];
  for (DType dt : {DType::f32, DType::bf16, DType::i32}) {
    DeviceTensor part(counts[std::size_t(r)], dt), whole(total, dt);
    upload(part.t, [&](std::int64_t j) { return double(first + j); });
    comm_->all_gather(whole.t, part.t, {.counts = counts})->wait();
    expect_values(whole.t, [&](std::int64_t i) { return double(i); }, "all_gather uneven");

    upload(whole.t, [&](std::int64_t i) { return r + double(i % 11); });
    comm_->reduce_scatter(part.t, whole.t, {.counts = counts})->wait();
    expect_values(part.t, [&](std::int64_t j) { return p * (p - 1) / 2.0 + p * double((first + j) % 11); },
                  "reduce_scatter uneven");
  }
  comm_->barrier()->wait();
}

}  // namespace
}  // namespace tidal::comm
