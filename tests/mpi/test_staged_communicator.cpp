// StagedCommunicator's staging logic over the real MpiCommunicator: a staging that treats every
// tensor as unreadable by MPI (as GPU memory is) copies each operand to a host buffer of its own,
// so every collective and point-to-point operation runs on copies. Each must give the unstaged
// answer (closed form), move exactly the operands its contract names (out before, back after),
// leave the tensors it must not write unchanged, pass its error on, and free its buffers once done.
#include "comm/staged_communicator.h"
#include "support/mpi.h"

#include <gtest/gtest.h>

#include <memory>

namespace tidal::comm {
namespace {

using testing::mpi;
constexpr Seconds kTimeout{60};

// Stages every tensor through a host copy of its own (from `buffers`, which counts them) and
// counts the bytes each way.
class CountingStaging final : public Staging {
 public:
  bool needs_staging(const Tensor& t) const override { return t.defined(); }
  Tensor to_host(const Tensor& t, bool copy) override {
    Tensor host = Tensor::empty(t.shape(), t.dtype(), buffers);
    if (copy) {
      host.copy_from(t);
      out += std::int64_t(t.nbytes());
    }
    return host;
  }
  void from_host(Tensor& t, const Tensor& host) override {
    t.copy_from(host);
    back += std::int64_t(t.nbytes());
  }
  HostAllocator buffers;
  std::int64_t out = 0, back = 0;
};

struct Staged {
  std::shared_ptr<CountingStaging> staging = std::make_shared<CountingStaging>();
  StagedCommunicator comm{mpi().world(kTimeout), staging};
};

Tensor iota(std::int64_t n, float base) {
  Tensor t = Tensor::empty({n});
  for (std::int64_t i = 0; i < n; ++i) t.data<float>()[i] = base + float(i);
  return t;
}

TEST(StagedCommunicator, AllReduceStagesOutAndBack) {
  Staged s;
  const int p = s.comm.size(), r = s.comm.rank();
  Tensor t = iota(5, float(r));
  s.comm.all_reduce(t)->wait();
  for (std::int64_t i = 0; i < 5; ++i) EXPECT_EQ(t.data<float>()[i], float(p * i + p * (p - 1) / 2)) << i;
  EXPECT_EQ(s.staging->out, 20);
  EXPECT_EQ(s.staging->back, 20);
}

TEST(StagedCommunicator, BroadcastSendsTheRootsOnlyAndWritesTheOthers) {
  Staged s;
  const int r = s.comm.rank(), root = s.comm.size() - 1;
  Tensor t = iota(3, float(10 * r));
  s.comm.broadcast(t, {.root = root})->wait();
  for (std::int64_t i = 0; i < 3; ++i) EXPECT_EQ(t.data<float>()[i], float(10 * root + i));
  EXPECT_EQ(s.staging->out, r == root ? 12 : 0);
  EXPECT_EQ(s.staging->back, r == root ? 0 : 12);
}

TEST(StagedCommunicator, ReduceWritesTheRootOnly) {
  Staged s;
  const int p = s.comm.size(), r = s.comm.rank();
  Tensor t = iota(4, float(r));
  s.comm.reduce(t, {.root = 0})->wait();
  for (std::int64_t i = 0; i < 4; ++i)
    EXPECT_EQ(t.data<float>()[i], r == 0 ? float(p * i + p * (p - 1) / 2) : float(r + i)) << i;
  EXPECT_EQ(s.staging->back, r == 0 ? 16 : 0);
}

TEST(StagedCommunicator, AllGatherAndReduceScatterUnevenCounts) {
  Staged s;
  const int p = s.comm.size(), r = s.comm.rank();
  const std::vector<std::int64_t> counts = split_counts(2 * p + 1, p);
  std::int64_t first = 0;
  for (int q = 0; q < r; ++q) first += counts[std::size_t(q)];
  // all_gather: rank q contributes counts[q] elements valued by their global position.
  const Tensor mine = iota(counts[std::size_t(r)], float(first));
  Tensor all = Tensor::full({2 * p + 1}, -1.0f);
  s.comm.all_gather(all, mine, {.counts = counts})->wait();
  for (std::int64_t i = 0; i < 2 * p + 1; ++i) EXPECT_EQ(all.data<float>()[i], float(i)) << i;
  EXPECT_EQ(s.staging->out, mine.nbytes()) << "only `in` goes out";
  EXPECT_EQ(s.staging->back, all.nbytes()) << "only `out` comes back";
  EXPECT_EQ(mine.data<float>()[0], float(first)) << "`in` is not written";
  // reduce_scatter: every rank gives 0..n-1; each gets p times its part.
  const Tensor whole = iota(2 * p + 1, 0.0f);
  Tensor part = Tensor::empty({counts[std::size_t(r)]});
  s.comm.reduce_scatter(part, whole, {.counts = counts})->wait();
  for (std::int64_t i = 0; i < part.numel(); ++i) EXPECT_EQ(part.data<float>()[i], float(p * (first + i))) << i;
}

TEST(StagedCommunicator, SendAndRecvAroundARing) {
  Staged s;
  const int p = s.comm.size(), r = s.comm.rank();
  const Tensor out = iota(6, float(100 * r));
  Tensor in = Tensor::zeros({6});
  WorkPtr sent = s.comm.send(out, (r + 1) % p, {.tag = 7});
  WorkPtr got = s.comm.recv(in, (r + p - 1) % p, {.tag = 7});
  sent->wait();
  got->wait();
  for (std::int64_t i = 0; i < 6; ++i) EXPECT_EQ(in.data<float>()[i], float(100 * ((r + p - 1) % p) + i));
  EXPECT_EQ(s.staging->out, 24);
  EXPECT_EQ(s.staging->back, 24);
}

TEST(StagedCommunicator, PollingCompletesAndCopiesBackOnce) {
  Staged s;
  Tensor t = iota(8, 1.0f);
  WorkPtr w = s.comm.all_reduce(t);
  while (!w->is_completed()) {
  }
  w->wait();
  EXPECT_TRUE(w->is_completed());
  EXPECT_EQ(s.staging->back, 32) << "the copy back ran once, however often the work was asked";
  EXPECT_EQ(t.data<float>()[0], float(s.comm.size()));
}

TEST(StagedCommunicator, TheHostBuffersGoOnceTheWorkIsDone) {
  Staged s;
  Tensor t = iota(1024, 0.0f);
  WorkPtr w = s.comm.all_reduce(t);
  EXPECT_EQ(s.staging->buffers.current_bytes(), 4096u) << "one buffer while the operation runs";
  w->wait();
  w.reset();  // the host communicator's own references go when its work completes
  EXPECT_EQ(s.staging->buffers.current_bytes(), 0u);
  EXPECT_EQ(s.staging->buffers.peak_bytes(), 4096u);
}

TEST(StagedCommunicator, AnInvalidOperationThrowsAndCopiesNothingBack) {
  Staged s;
  Tensor t = iota(4, 0.0f);
  EXPECT_THROW(s.comm.broadcast(t, {.root = s.comm.size()})->wait(), Error);
  EXPECT_EQ(s.staging->back, 0);
  s.comm.barrier()->wait();
}

}  // namespace
}  // namespace tidal::comm
