// DeviceCommunicator's routing rule: a collective whose operands are all on the device goes to the
// device group (NCCL on GPUs); one with a host operand, or with operands on both sides, and every
// send, recv and barrier go to the staged group (MPI). Over two counting groups of one rank, with
// the test's own "device" (tensors from one allocator), so each call's group is read off the counts.
#include "comm/counting_communicator.h"
#include "comm/device_communicator.h"
#include "comm/self_communicator.h"

#include <gtest/gtest.h>

#include <memory>

namespace tidal::comm {
namespace {

struct Routed {
  HostAllocator device_memory{MemoryTier::device};
  std::shared_ptr<CountingCommunicator> device =
      std::make_shared<CountingCommunicator>(std::make_shared<SelfCommunicator>("device"));
  std::shared_ptr<CountingCommunicator> staged =
      std::make_shared<CountingCommunicator>(std::make_shared<SelfCommunicator>("staged"));
  DeviceCommunicator routed{device, staged, [this](const Tensor& t) { return t.allocator() == &device_memory; }};

  Tensor on_device(std::int64_t n) { return Tensor::full({n}, 1.0f, device_memory); }
  static Tensor on_host(std::int64_t n) { return Tensor::full({n}, 1.0f, host_allocator()); }
  static std::int64_t calls(const CountingCommunicator& c, const std::string& op) {
    const auto stats = c.stats();
    const auto it = stats.find(op);
    return it == stats.end() ? 0 : it->second.calls;
  }
};

TEST(DeviceCommunicator, CollectivesOnDeviceOperandsGoToTheDeviceGroup) {
  Routed r;
  Tensor a = r.on_device(4), out = r.on_device(4);
  r.routed.all_reduce(a)->wait();
  r.routed.broadcast(a)->wait();
  r.routed.reduce(a)->wait();
  r.routed.all_gather(out, a)->wait();
  r.routed.reduce_scatter(out, a)->wait();
  for (const char* op : {"all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter"}) {
    EXPECT_EQ(Routed::calls(*r.device, op), 1) << op;
    EXPECT_EQ(Routed::calls(*r.staged, op), 0) << op;
  }
}

TEST(DeviceCommunicator, HostOrMixedOperandsGoToTheStagedGroup) {
  Routed r;
  Tensor host = Routed::on_host(4), dev = r.on_device(4), host_out = Routed::on_host(4), dev_out = r.on_device(4);
  r.routed.all_reduce(host)->wait();
  r.routed.broadcast(host)->wait();
  r.routed.reduce(host)->wait();
  r.routed.all_gather(host_out, dev)->wait();     // a checkpoint gathering GPU blocks into host memory
  r.routed.reduce_scatter(dev_out, host)->wait();
  r.routed.barrier()->wait();
  for (const char* op : {"all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "barrier"}) {
    EXPECT_EQ(Routed::calls(*r.staged, op), 1) << op;
    EXPECT_EQ(Routed::calls(*r.device, op), 0) << op;
  }
}

TEST(DeviceCommunicator, PointToPointAlwaysGoesToTheStagedGroup) {
  // Tags keep a pipeline's streams apart on MPI; NCCL would match them by order. A group of one
  // has no peer, so the error names the group that took the call.
  Routed r;
  Tensor dev = r.on_device(4);
  try {
    r.routed.send(dev, 0);
    FAIL() << "send on a group of one";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("group 'staged'"), std::string::npos) << e.what();
  }
  try {
    r.routed.recv(dev, 0);
    FAIL() << "recv on a group of one";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("group 'staged'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tidal::comm
