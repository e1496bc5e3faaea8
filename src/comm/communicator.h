// Collective communication in the shape of PyTorch c10d's Backend: a Communicator is one group
// of ranks (rank, size, name); every operation takes an options struct and returns a Work that
// completes asynchronously. Implementations: MpiCommunicator (host tensors) and NcclCommunicator
// (device tensors); CountingCommunicator wraps either and records volume and time.
//
// Invariants every implementation keeps:
// - operations on one communicator are started in call order, and every rank of the group must
//   call the same operations in the same order (as with MPI and NCCL);
// - the tensors an operation touches stay alive until its Work completes (the Work holds them);
// - an operation that does not complete within its timeout ends the job with a message naming
//   the group, the operation and the ranks that did not arrive (the watchdog), never a hang.
#pragma once

#include "core/tensor.h"

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <condition_variable>
#include <string>
#include <vector>

namespace tidal::comm {

using Seconds = std::chrono::duration<double>;

enum class ReduceOp { sum, avg, max, min };
const char* reduce_op_name(ReduceOp op);

// timeout zero = the communicator's default (parallel.timeout_s).
struct AllReduceOptions {
  ReduceOp op = ReduceOp::sum;
  Seconds timeout{0};
};
struct BroadcastOptions {
  int root = 0;
  Seconds timeout{0};
};
struct ReduceOptions {
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  Seconds timeout{0};
};
// counts[r] = elements rank r contributes (all-gather) or receives (reduce-scatter); empty =
// equal parts. split_counts() gives balanced parts for sizes the group does not divide.
struct AllGatherOptions {
  std::vector<std::int64_t> counts;
  Seconds timeout{0};
};
struct ReduceScatterOptions {
  ReduceOp op = ReduceOp::sum;
  std::vector<std::int64_t> counts;
  Seconds timeout{0};
};
struct PointToPointOptions {
  int tag = 0;
  Seconds timeout{0};
};
struct BarrierOptions {
  Seconds timeout{0};
};

// n elements in `parts` balanced parts: the first n % parts get one more.
std::vector<std::int64_t> split_counts(std::int64_t n, int parts);

// The handle of one asynchronous operation. wait() blocks until it completes and rethrows its
// error; callbacks added with on_completion run once it has (on the thread that completes it).
class Work {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~Work() = default;

  virtual bool is_completed();
  virtual void wait();
  std::exception_ptr error();
  void on_completion(std::function<void(const Work&)> callback);

  // When the operation was issued and completed (completed_at is valid once is_completed()).
  Clock::time_point issued_at() const { return issued_at_; }
  Clock::time_point completed_at() const { return completed_at_; }

  // Called by the implementation, once.
  void mark_completed(std::exception_ptr error = nullptr);

 private:
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;     // the operation finished (callbacks added now run at once)
  bool settled_ = false;  // ... and the callbacks registered before that have run
  std::exception_ptr error_;
  std::vector<std::function<void(const Work&)>> callbacks_;
  Clock::time_point issued_at_ = Clock::now();
  Clock::time_point completed_at_{};
};

using WorkPtr = std::shared_ptr<Work>;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const std::string& name() const = 0;   // "world", "data", "tensor_row", ...
  virtual const std::vector<int>& world_ranks() const = 0;  // world rank of each group rank

  // In place: every rank ends with op over all ranks' `t`.
  virtual WorkPtr all_reduce(Tensor& t, const AllReduceOptions& options = {}) = 0;
  // In place: every rank ends with the root's `t`.
  virtual WorkPtr broadcast(Tensor& t, const BroadcastOptions& options = {}) = 0;
  // In place: the root ends with op over all ranks' `t`; other ranks' `t` is unchanged.
  virtual WorkPtr reduce(Tensor& t, const ReduceOptions& options = {}) = 0;
  // out [sum of counts] = concatenation of every rank's `in` in rank order.
  virtual WorkPtr all_gather(Tensor& out, const Tensor& in, const AllGatherOptions& options = {}) = 0;
  // out [counts[rank]] = this rank's part of op over every rank's `in` [sum of counts].
  virtual WorkPtr reduce_scatter(Tensor& out, const Tensor& in, const ReduceScatterOptions& options = {}) = 0;
  virtual WorkPtr send(const Tensor& t, int dst, const PointToPointOptions& options = {}) = 0;
  virtual WorkPtr recv(Tensor& t, int src, const PointToPointOptions& options = {}) = 0;
  virtual WorkPtr barrier(const BarrierOptions& options = {}) = 0;
};

// Checks shared by implementations: the element counts of an all-gather / reduce-scatter
// (explicit or equal parts), validated against the tensors. Throws tidal::Error naming the call.
std::vector<std::int64_t> gather_counts(const Communicator& c, const std::vector<std::int64_t>& counts,
                                        std::int64_t local, std::int64_t total, const char* what);

}  // namespace tidal::comm
