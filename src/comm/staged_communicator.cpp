#include "comm/staged_communicator.h"

#include "core/error.h"
#include "core/gpu.h"

#include <algorithm>
#include <utility>

namespace tidal::comm {

// Completes when its host operation has (once started: the stager may still hold it) and the
// results have been queued into the device tensor; the copy back is queued once, by the first
// thread that finds the host operation done.
class StagedWork final : public Work {
 public:
  StagedWork(std::shared_ptr<Staging> staging, Tensor device, Tensor back)
      : staging_(std::move(staging)), device_(std::move(device)), back_(std::move(back)) {}

  // The host operation has started as `host`, or could not (`error`).
  void started(WorkPtr host, std::exception_ptr error = nullptr) {
    {
      std::lock_guard lock(mutex_);
      host_ = std::move(host);
      start_error_ = error;
      started_ = true;
    }
    started_cv_.notify_all();
    if (error) settle();
  }

  bool is_completed() override {
    if (Work::is_completed()) return true;
    std::lock_guard lock(mutex_);
    if (!started_ || !host_->is_completed()) return false;
    settle_locked();
    return true;
  }

  void wait() override {
    WorkPtr host;
    {
      std::unique_lock lock(mutex_);
      started_cv_.wait(lock, [&] { return started_; });
      host = host_;
    }
    if (host) {
      try {
        host->wait();
      } catch (...) {  // settle() records it
      }
    }
    settle();
    Work::wait();
  }

 private:
  void settle() {
    std::lock_guard lock(mutex_);
    settle_locked();
  }
  void settle_locked() {
    if (settled_) return;
    settled_ = true;
    std::exception_ptr error = start_error_ ? start_error_ : host_->error();
    if (!error && back_.defined()) {
      try {
        staging_->from_host(device_, std::move(back_));
      } catch (...) {
        error = std::current_exception();
      }
    }
    back_ = device_ = Tensor();  // the buffers go back now
    host_.reset();
    mark_completed(error);
  }

  std::shared_ptr<Staging> staging_;
  Tensor device_, back_;
  std::mutex mutex_;
  std::condition_variable started_cv_;
  bool started_ = false, settled_ = false;
  WorkPtr host_;
  std::exception_ptr start_error_;
};

namespace {

class GpuStaging final : public Staging {
 public:
  ~GpuStaging() override {
    for (CopyBack& c : copying_back_) c.done.wait();
  }
  bool needs_staging(const Tensor& t) const override { return t.defined() && t.device().is_cuda(); }
  HostCopy to_host(const Tensor& t, bool copy) override {
    TIDAL_ASSERT(t.is_contiguous(), "staging needs a contiguous tensor, got {}", t.str());
    Tensor host = Tensor::empty(t.shape(), t.dtype(), pinned_host_allocator());
    if (!copy) return {host, {}};
    const GpuFence copied = copy_to_host_behind_compute(host.raw(), t.raw(), t.nbytes());
    return {host, [copied] { copied.wait(); }};
  }
  void from_host(Tensor& t, Tensor host) override {
    const GpuFence read = copy_to_device_on_compute(t.raw(), host.raw(), t.nbytes());
    std::lock_guard lock(mutex_);
    std::erase_if(copying_back_, [](const CopyBack& c) { return c.done.passed(); });
    copying_back_.push_back({read, std::move(host)});
  }

 private:
  struct CopyBack {  // a host buffer the compute stream has yet to read
    GpuFence done;
    Tensor host;
  };
  std::mutex mutex_;
  std::vector<CopyBack> copying_back_;
};

}  // namespace

std::unique_ptr<Staging> gpu_staging() { return std::make_unique<GpuStaging>(); }

StagedCommunicator::~StagedCommunicator() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  queued_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Tensor StagedCommunicator::host_side(const Tensor& t, bool copy, Pending& p) {
  if (!staging_->needs_staging(t)) return t;
  Staging::HostCopy c = staging_->to_host(t, copy);
  if (c.copied) {
    p.copies.push_back(std::move(c.copied));
    p.operands.push_back(t);
  }
  return c.host;
}

bool StagedCommunicator::copied(Pending& p) {
  try {
    for (const std::function<void()>& c : p.copies) c();
  } catch (...) {
    p.work->started(nullptr, std::current_exception());
    p.operands.clear();
    return false;
  }
  p.operands.clear();  // their copies have ended
  return true;
}

void StagedCommunicator::start(Pending& p) {
  WorkPtr host;
  try {
    host = p.start();
  } catch (...) {
    p.work->started(nullptr, std::current_exception());
    return;
  }
  p.work->started(std::move(host));
}

WorkPtr StagedCommunicator::issue(Pending p, Tensor device, Tensor back) {
  if (!back.defined() || back.raw() == device.raw()) back = Tensor();  // unstaged, or nothing comes back
  p.work = std::make_shared<StagedWork>(staging_, std::move(device), std::move(back));
  WorkPtr work = p.work;
  std::unique_lock lock(mutex_);
  if (queue_.empty() && p.copies.empty()) {
    start(p);
    return work;
  }
  queue_.push_back(std::move(p));
  if (!thread_.joinable()) thread_ = std::thread([this] { stager(); });
  lock.unlock();
  queued_.notify_one();
  return work;
}

void StagedCommunicator::stager() {
  std::unique_lock lock(mutex_);
  for (;;) {
    queued_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything queued has started
    Pending& next = queue_.front();  // stays at the front while its copies run: later calls queue behind it
    lock.unlock();
    const bool ready = copied(next);
    lock.lock();
    if (ready) start(next);
    queue_.pop_front();
  }
}

WorkPtr StagedCommunicator::all_reduce(Tensor& t, const AllReduceOptions& options) {
  Pending p;
  Tensor h = host_side(t, true, p);
  p.start = [this, h, options]() mutable { return host_->all_reduce(h, options); };
  return issue(std::move(p), t, h);
}

WorkPtr StagedCommunicator::broadcast(Tensor& t, const BroadcastOptions& options) {
  Pending p;
  const bool root = rank() == options.root;
  Tensor h = host_side(t, root, p);
  p.start = [this, h, options]() mutable { return host_->broadcast(h, options); };
  return issue(std::move(p), t, root ? Tensor() : h);
}

WorkPtr StagedCommunicator::reduce(Tensor& t, const ReduceOptions& options) {
  Pending p;
  Tensor h = host_side(t, true, p);
  p.start = [this, h, options]() mutable { return host_->reduce(h, options); };
  return issue(std::move(p), t, rank() == options.root ? h : Tensor());
}

WorkPtr StagedCommunicator::all_gather(Tensor& out, const Tensor& in, const AllGatherOptions& options) {
  Pending p;
  const Tensor h_in = host_side(in, true, p);
  Tensor h_out = host_side(out, false, p);
  p.start = [this, h_out, h_in, options]() mutable { return host_->all_gather(h_out, h_in, options); };
  return issue(std::move(p), out, h_out);
}

WorkPtr StagedCommunicator::reduce_scatter(Tensor& out, const Tensor& in, const ReduceScatterOptions& options) {
  Pending p;
  const Tensor h_in = host_side(in, true, p);
  Tensor h_out = host_side(out, false, p);
  p.start = [this, h_out, h_in, options]() mutable { return host_->reduce_scatter(h_out, h_in, options); };
  return issue(std::move(p), out, h_out);
}

WorkPtr StagedCommunicator::send(const Tensor& t, int dst, const PointToPointOptions& options) {
  Pending p;
  const Tensor h = host_side(t, true, p);
  p.start = [this, h, dst, options] { return host_->send(h, dst, options); };
  return issue(std::move(p), Tensor(), Tensor());
}

WorkPtr StagedCommunicator::recv(Tensor& t, int src, const PointToPointOptions& options) {
  Pending p;
  Tensor h = host_side(t, false, p);
  p.start = [this, h, src, options]() mutable { return host_->recv(h, src, options); };
  return issue(std::move(p), t, h);
}

WorkPtr StagedCommunicator::barrier(const BarrierOptions& options) {
  Pending p;
  p.start = [this, options] { return host_->barrier(options); };
  return issue(std::move(p), Tensor(), Tensor());
}

}  // namespace tidal::comm
