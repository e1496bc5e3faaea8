// StagedCommunicator: collectives on tensors a host communicator cannot read (GPU memory), over
// that communicator (MPI): each operation copies its device operands into host buffers, runs
// the host operation on them, and copies the results back into the device tensors before its
// Work completes. What lets several ranks share one GPU, or use GPUs without NCCL.
//
// Which operand travels which way:
//   all_reduce, broadcast, reduce   t out and back (broadcast: the root's only out; reduce: back
//                                   on the root only, the other ranks' t unchanged)
//   all_gather, reduce_scatter      in out, out back
//   send / recv                     out / back
// Host tensors pass through unstaged.
//
// Overlap: a copy out may still be under way when the call returns (the GPU's runs on the staging
// stream behind the compute stream's queued work), so the caller goes on queuing compute while it
// runs. The host operations must still start in call order (every rank calls them in one order),
// so an operation whose copies have not ended waits in a queue with every operation after it, and
// the communicator's stager thread starts them in turn as their copies end; an operation with
// nothing to wait for, behind an empty queue, starts on the calling thread. The copies back run on
// the thread that waits on (or polls) the Work, queued behind the device's earlier work, and the
// Work completes once they are queued: later device work sees the results (as NCCL's Work). The
// operands stay alive until their copies have ended, even if the caller drops the Work.
#pragma once

#include "comm/communicator.h"

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace tidal::comm {

class StagedWork;

// Where tensors live and how they reach the host: the GPU's (core/gpu.h: pinned host buffers,
// copies on the staging stream out and on the compute stream back) or a test's.
class Staging {
 public:
  // A copy out under way: `host` holds the values once `copied` has returned (empty: already; it
  // throws if the copy failed).
  struct HostCopy {
    Tensor host;
    std::function<void()> copied;
  };
  virtual ~Staging() = default;
  // Whether the host communicator cannot use t directly.
  virtual bool needs_staging(const Tensor& t) const = 0;
  // A host tensor of t's shape and dtype that will hold t's values when `copy` (t as the device's
  // queued work leaves it; t must stay allocated and unwritten until `copied` has returned).
  virtual HostCopy to_host(const Tensor& t, bool copy) = 0;
  // Queues host's values into t behind the device's earlier work, so that later device work sees
  // them; host is kept until they have been read.
  virtual void from_host(Tensor& t, Tensor host) = 0;
};

// The GPU's staging: page-locked host buffers, so the copies run at full PCIe / NVLink-C2C speed.
std::unique_ptr<Staging> gpu_staging();

class StagedCommunicator final : public Communicator {
 public:
  StagedCommunicator(std::shared_ptr<Communicator> host, std::shared_ptr<Staging> staging)
      : host_(std::move(host)), staging_(std::move(staging)) {}
  // Starts every queued operation (other ranks wait for them), then stops the stager thread.
  ~StagedCommunicator() override;
  StagedCommunicator(const StagedCommunicator&) = delete;
  StagedCommunicator& operator=(const StagedCommunicator&) = delete;

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const std::string& name() const override { return host_->name(); }
  const std::vector<int>& world_ranks() const override { return host_->world_ranks(); }

  WorkPtr all_reduce(Tensor& t, const AllReduceOptions& options = {}) override;
  WorkPtr broadcast(Tensor& t, const BroadcastOptions& options = {}) override;
  WorkPtr reduce(Tensor& t, const ReduceOptions& options = {}) override;
  WorkPtr all_gather(Tensor& out, const Tensor& in, const AllGatherOptions& options = {}) override;
  WorkPtr reduce_scatter(Tensor& out, const Tensor& in, const ReduceScatterOptions& options = {}) override;
  WorkPtr send(const Tensor& t, int dst, const PointToPointOptions& options = {}) override;
  WorkPtr recv(Tensor& t, int src, const PointToPointOptions& options = {}) override;
  WorkPtr barrier(const BarrierOptions& options = {}) override;

 private:
  // An operation on its way to the host communicator.
  struct Pending {
    std::vector<std::function<void()>> copies;  // the copies out it waits for
    std::vector<Tensor> operands;               // the device tensors they read, kept until they end
    std::function<WorkPtr()> start;             // the host operation
    std::shared_ptr<StagedWork> work;
  };

  // The host operand for t: t itself, or a host buffer (holding t's values once copied, when
  // `copy`: its copy joins p's).
  Tensor host_side(const Tensor& t, bool copy, Pending& p);
  // Queues p (or starts it now, when nothing is queued and it waits for no copy); its Work copies
  // `back` (when staged) into `device` once the host operation is done.
  WorkPtr issue(Pending p, Tensor device, Tensor back);
  // Waits for p's copies out; false (p's Work failed) if one did.
  bool copied(Pending& p);
  // Starts p's host operation (the caller holds mutex_, so operations start in queue order).
  void start(Pending& p);
  void stager();

  std::shared_ptr<Communicator> host_;
  std::shared_ptr<Staging> staging_;
  std::mutex mutex_;  // guards queue_ and stopping_, and is held while an operation starts
  std::condition_variable queued_;
  std::deque<Pending> queue_;  // in call order; the front is the next to start
  bool stopping_ = false;
  std::thread thread_;  // the stager, from the first operation that must wait
};

}  // namespace tidal::comm
