#include "comm/staged_communicator.h"

#include "core/error.h"
#include "core/gpu.h"

#include <mutex>

namespace tidal::comm {
namespace {

// Completes when the host operation has and the results are back in the device tensor; the copy
// runs once, on the first thread that finds the host operation done.
class StagedWork final : public Work {
 public:
  StagedWork(WorkPtr host, std::shared_ptr<Staging> staging, Tensor device, Tensor back)
      : host_(std::move(host)), staging_(std::move(staging)), device_(std::move(device)), back_(std::move(back)) {}

  bool is_completed() override {
    if (Work::is_completed()) return true;
    if (!host_->is_completed()) return false;
    settle();
    return true;
  }

  void wait() override {
    try {
      host_->wait();
    } catch (...) {  // settle() records it
    }
    settle();
    Work::wait();
  }

 private:
  void settle() {
    std::call_once(once_, [&] {
      std::exception_ptr error = host_->error();
      if (!error && back_.defined()) {
        try {
          staging_->from_host(device_, back_);
        } catch (...) {
          error = std::current_exception();
        }
      }
      back_ = device_ = Tensor();  // the buffers go back now
      mark_completed(error);
    });
  }

  WorkPtr host_;
  std::shared_ptr<Staging> staging_;
  Tensor device_, back_;
  std::once_flag once_;
};

class GpuStaging final : public Staging {
 public:
  bool needs_staging(const Tensor& t) const override { return t.defined() && t.device().is_cuda(); }
  Tensor to_host(const Tensor& t, bool copy) override {
    TIDAL_ASSERT(t.is_contiguous(), "staging needs a contiguous tensor, got {}", t.str());
    Tensor host = Tensor::empty(t.shape(), t.dtype(), pinned_host_allocator());
    if (copy) copy_bytes(host.raw(), host.device(), t.raw(), t.device(), t.nbytes());
    return host;
  }
  void from_host(Tensor& t, const Tensor& host) override {
    copy_bytes(t.raw(), t.device(), host.raw(), host.device(), t.nbytes());
  }
};

}  // namespace

std::unique_ptr<Staging> gpu_staging() { return std::make_unique<GpuStaging>(); }

Tensor StagedCommunicator::host_side(const Tensor& t, bool copy) {
  return staging_->needs_staging(t) ? staging_->to_host(t, copy) : t;
}

WorkPtr StagedCommunicator::copy_back(WorkPtr work, Tensor device, Tensor back) {
  if (!back.defined() || back.raw() == device.raw()) back = Tensor();  // unstaged, or nothing comes back
  return std::make_shared<StagedWork>(std::move(work), staging_, std::move(device), std::move(back));
}

WorkPtr StagedCommunicator::all_reduce(Tensor& t, const AllReduceOptions& options) {
  Tensor h = host_side(t, true);
  return copy_back(host_->all_reduce(h, options), t, h);
}

WorkPtr StagedCommunicator::broadcast(Tensor& t, const BroadcastOptions& options) {
  Tensor h = host_side(t, rank() == options.root);
  return copy_back(host_->broadcast(h, options), t, rank() == options.root ? Tensor() : h);
}

WorkPtr StagedCommunicator::reduce(Tensor& t, const ReduceOptions& options) {
  Tensor h = host_side(t, true);
  return copy_back(host_->reduce(h, options), t, rank() == options.root ? h : Tensor());
}

WorkPtr StagedCommunicator::all_gather(Tensor& out, const Tensor& in, const AllGatherOptions& options) {
  const Tensor h_in = host_side(in, true);
  Tensor h_out = host_side(out, false);
  return copy_back(host_->all_gather(h_out, h_in, options), out, h_out);
}

WorkPtr StagedCommunicator::reduce_scatter(Tensor& out, const Tensor& in, const ReduceScatterOptions& options) {
  const Tensor h_in = host_side(in, true);
  Tensor h_out = host_side(out, false);
  return copy_back(host_->reduce_scatter(h_out, h_in, options), out, h_out);
}

WorkPtr StagedCommunicator::send(const Tensor& t, int dst, const PointToPointOptions& options) {
  return copy_back(host_->send(host_side(t, true), dst, options), Tensor(), Tensor());
}

WorkPtr StagedCommunicator::recv(Tensor& t, int src, const PointToPointOptions& options) {
  Tensor h = host_side(t, false);
  return copy_back(host_->recv(h, src, options), t, h);
}

WorkPtr StagedCommunicator::barrier(const BarrierOptions& options) {
  return copy_back(host_->barrier(options), Tensor(), Tensor());
}

}  // namespace tidal::comm
