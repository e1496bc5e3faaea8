// StagedCommunicator's staging logic over the real MpiCommunicator: a staging that treats every
// tensor as unreadable by MPI (as GPU memory is) copies each operand to a host buffer of its own,
// so every collective and point-to-point operation runs on copies. Each must give the unstaged
// answer (closed form), move exactly the operands its contract names (out before, back after),
// leave the tensors it must not write unchanged, pass its error on, and free its buffers once done.
// A staging whose copies out finish later (a GPU's, behind the compute stream) must not hold up
// the caller, and the host operations must still start in call order.
#include "comm/staged_communicator.h"
#include "support/mpi.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

namespace tidal::comm {
namespace {

using testing::mpi;
constexpr Seconds kTimeout{60};

// Stages every tensor through a host copy of its own (from `buffers`, which counts them) and
// counts the bytes each way.
class CountingStaging final : public Staging {
 public:
  bool needs_staging(const Tensor& t) const override { return t.defined(); }
  HostCopy to_host(const Tensor& t, bool copy) override {
    Tensor host = Tensor::empty(t.shape(), t.dtype(), buffers);
    if (copy) {
      host.copy_from(t);
      out += std::int64_t(t.nbytes());
    }
    return {host, {}};
  }
  void from_host(Tensor& t, Tensor host) override {
    t.copy_from(host);
    back += std::int64_t(t.nbytes());
  }
  HostAllocator buffers;
  std::int64_t out = 0, back = 0;
};

// Copies out only when `copied` is called, and those named by `held` (the k-th copy out of this
// rank) only once the test has opened the gate: a GPU's copy stream running behind compute. The
// copy reads the operand's memory through a raw pointer, so a staged communicator that let the
// operand go before its copy would read freed memory (ASan) or wrong values.
class GatedStaging final : public Staging {
 public:
  explicit GatedStaging(std::set<int> held) : held_(std::move(held)) {}
  bool needs_staging(const Tensor& t) const override { return t.defined(); }
  HostCopy to_host(const Tensor& t, bool copy) override {
    Tensor host = Tensor::empty(t.shape(), t.dtype());
    if (!copy) return {host, {}};
    const bool held = held_.count(copies_++) > 0;
    const void* src = t.raw();
    const std::size_t bytes = t.nbytes();
    return {host, [this, held, src, bytes, host]() mutable {
              if (held) wait_for_gate();
              if (fail) throw Error("the copy out failed (as the test asked)");
              std::memcpy(host.raw(), src, bytes);
            }};
  }
  void from_host(Tensor& t, Tensor host) override { t.copy_from(host); }
  void open() {
    std::lock_guard lock(mutex_);
    open_ = true;
    opened_.notify_all();
  }
  bool fail = false;

 private:
  void wait_for_gate() {
    std::unique_lock lock(mutex_);
    if (!opened_.wait_for(lock, std::chrono::seconds(20), [&] { return open_; }))
      throw Error("the test never opened the gate: the copy was awaited before the call returned");
  }
  std::set<int> held_;
  int copies_ = 0;
  std::mutex mutex_;
  std::condition_variable opened_;
  bool open_ = false;
};

// Records the order in which the host operations start (the numel of their first operand).
class RecordingCommunicator final : public Communicator {
 public:
  explicit RecordingCommunicator(std::shared_ptr<Communicator> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }
  const std::vector<int>& world_ranks() const override { return inner_->world_ranks(); }
  WorkPtr all_reduce(Tensor& t, const AllReduceOptions& o) override { return note(t, inner_->all_reduce(t, o)); }
  WorkPtr broadcast(Tensor& t, const BroadcastOptions& o) override { return note(t, inner_->broadcast(t, o)); }
  WorkPtr reduce(Tensor& t, const ReduceOptions& o) override { return note(t, inner_->reduce(t, o)); }
  WorkPtr all_gather(Tensor& out, const Tensor& in, const AllGatherOptions& o) override {
    return note(in, inner_->all_gather(out, in, o));
  }
  WorkPtr reduce_scatter(Tensor& out, const Tensor& in, const ReduceScatterOptions& o) override {
    return note(in, inner_->reduce_scatter(out, in, o));
  }
  WorkPtr send(const Tensor& t, int dst, const PointToPointOptions& o) override { return note(t, inner_->send(t, dst, o)); }
  WorkPtr recv(Tensor& t, int src, const PointToPointOptions& o) override { return note(t, inner_->recv(t, src, o)); }
  WorkPtr barrier(const BarrierOptions& o) override { return note(Tensor(), inner_->barrier(o)); }
  std::vector<std::int64_t> started() {
    std::lock_guard lock(mutex_);
    return started_;
  }

 private:
  WorkPtr note(const Tensor& t, WorkPtr w) {
    std::lock_guard lock(mutex_);
    started_.push_back(t.defined() ? t.numel() : 0);
    return w;
  }
  std::shared_ptr<Communicator> inner_;
  std::mutex mutex_;
  std::vector<std::int64_t> started_;
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

TEST(StagedCommunicator, ACopyStillUnderWayDoesNotHoldUpTheCaller) {
  auto staging = std::make_shared<GatedStaging>(std::set<int>{0});
  StagedCommunicator comm(mpi().world(kTimeout), staging);
  const int p = comm.size();
  Tensor t = iota(6, 1.0f);
  WorkPtr w = comm.all_reduce(t);  // returns with its copy out still held
  EXPECT_FALSE(w->is_completed());
  staging->open();
  w->wait();
  for (std::int64_t i = 0; i < 6; ++i) EXPECT_EQ(t.data<float>()[i], float(p * (1 + i))) << i;
}

TEST(StagedCommunicator, HostOperationsStartInCallOrderWhateverOrderTheCopiesEnd) {
  // Rank 0 holds its first copy, the others their second: were operations started as their
  // copies end, rank 0 would pair its second all-reduce with the others' first.
  const int r = mpi().world(kTimeout)->rank();
  auto staging = std::make_shared<GatedStaging>(std::set<int>{r == 0 ? 0 : 1});
  auto recording = std::make_shared<RecordingCommunicator>(mpi().world(kTimeout));
  StagedCommunicator comm(recording, staging);
  const int p = comm.size();
  Tensor first = Tensor::full({3}, 1.0f), second = Tensor::full({5}, 100.0f);
  WorkPtr a = comm.all_reduce(first);
  WorkPtr b = comm.all_reduce(second);
  WorkPtr c = comm.barrier();  // an unstaged operation waits its turn too
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  staging->open();
  a->wait();
  b->wait();
  c->wait();
  EXPECT_EQ(recording->started(), (std::vector<std::int64_t>{3, 5, 0}));
  EXPECT_EQ(first.data<float>()[2], float(p));
  EXPECT_EQ(second.data<float>()[4], float(100 * p));
}

TEST(StagedCommunicator, AnOperandDroppedByTheCallerLivesUntilItsCopy) {
  auto staging = std::make_shared<GatedStaging>(std::set<int>{0});
  StagedCommunicator comm(mpi().world(kTimeout), staging);
  const int p = comm.size(), r = comm.rank();
  Tensor all = Tensor::zeros({p});
  WorkPtr w = comm.all_gather(all, Tensor::full({1}, float(r)));  // a temporary `in`
  staging->open();
  w->wait();
  for (int q = 0; q < p; ++q) EXPECT_EQ(all.data<float>()[q], float(q)) << q;
}

TEST(StagedCommunicator, AFailedCopyFailsItsWorkAndTheGroupGoesOn) {
  auto staging = std::make_shared<GatedStaging>(std::set<int>{0});
  StagedCommunicator comm(mpi().world(kTimeout), staging);
  staging->fail = true;  // on every rank, so no rank waits for the operation that never starts
  Tensor t = iota(4, 0.0f);
  WorkPtr w = comm.all_reduce(t);
  staging->open();
  EXPECT_THROW(w->wait(), Error);
  EXPECT_EQ(t.data<float>()[3], 3.0f) << "nothing was copied back";
  comm.barrier()->wait();
}

TEST(StagedCommunicator, ClosingStartsWhatIsStillQueued) {
  auto recording = std::make_shared<RecordingCommunicator>(mpi().world(kTimeout));
  {
    auto staging = std::make_shared<GatedStaging>(std::set<int>{0});
    StagedCommunicator comm(recording, staging);
    Tensor t = iota(2, 1.0f);
    comm.all_reduce(t).reset();  // dropped unwaited, its copy still held
    staging->open();
  }  // the communicator starts what it has queued before it goes
  EXPECT_EQ(recording->started(), (std::vector<std::int64_t>{2}));
  Tensor one = Tensor::full({1}, 1.0f);
  mpi().world(kTimeout)->all_reduce(one)->wait();  // every rank's all-reduce matched: the group is in step
  EXPECT_EQ(one.data<float>()[0], float(mpi().world(kTimeout)->size()));
}

}  // namespace
}  // namespace tidal::comm
