#include "comm/nccl_communicator.h"

#include "core/profile.h"

#include "core/cuda/runtime.h"
#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

// NCCL's status check beside CUDA's (core/cuda/runtime.h), naming the call, file and line.
#define TIDAL_NCCL_CALL(call)                                                                        \
  do {                                                                                               \
    const ncclResult_t status_ = (call);                                                             \
    TIDAL_CHECK(status_ == ncclSuccess, "{} failed at {}:{}: {}", #call, __FILE__, __LINE__,         \
                ncclGetErrorString(status_));                                                        \
  } while (0)

namespace tidal::comm {
namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i32: return ncclInt32;
    case DType::u8: return ncclUint8;
  }
  TIDAL_ASSERT(false, "no NCCL type for {}", dtype_name(t));
}

ncclRedOp_t nccl_op(ReduceOp op, DType t, const char* what) {
  TIDAL_CHECK(!(op == ReduceOp::avg && t == DType::i32), "{}: reduce op avg needs a floating-point tensor, got i32",
              what);
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  return ncclSum;
}

char* at_element(const Tensor& t, std::int64_t i) {
  return static_cast<char*>(t.raw()) + std::size_t(i) * dtype_size(t.dtype());
}

// Completes when its event has fired; wait() enforces the timeout (the watchdog for NCCL).
class NcclWork final : public Work {
 public:
  NcclWork(cudaEvent_t done, cudaStream_t compute, std::vector<Tensor> keep, std::string what, Seconds timeout,
           ncclComm_t comm, std::shared_ptr<std::atomic<bool>> aborted)
      : done_(done), compute_(compute), keep_(std::move(keep)), what_(std::move(what)), timeout_(timeout), comm_(comm),
        aborted_(std::move(aborted)) {}
  // A work dropped before it completed (or after it failed) still holds its tensors. Their memory
  // returns to the pool on the compute stream, so that stream first waits for the operation: the
  // free is then ordered after NCCL's last use of the memory.
  ~NcclWork() override {
    if (!keep_.empty()) cudaStreamWaitEvent(compute_, done_, 0);
    keep_.clear();
    cudaEventDestroy(done_);
  }

  bool is_completed() override {
    if (Work::is_completed()) return true;
    const cudaError_t s = cudaEventQuery(done_);
    if (s == cudaErrorNotReady) return false;
    settle(s);
    return true;
  }

  void wait() override {
    const OpTimer timer(OpFamily::communication);
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout_);
    while (!is_completed()) {
      if (Clock::now() > deadline) {
        // Abort the communicator so every later operation fails fast instead of hanging.
        if (!aborted_->exchange(true)) ncclCommAbort(comm_);
        settle_error(fmt::format("{} did not complete within {:g} s; the NCCL communicator was aborted (a rank died "
                                 "or called a different operation; raise parallel.timeout_s if a rank is merely slow)",
                                 what_, timeout_.count()));
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    Work::wait();
  }

 private:
  void settle(cudaError_t s) {
    std::lock_guard lock(settle_mutex_);
    if (Work::is_completed()) return;
    ncclResult_t async = ncclSuccess;
    if (s == cudaSuccess && !aborted_->load()) ncclCommGetAsyncError(comm_, &async);
    if (s != cudaSuccess) {
      mark_completed(std::make_exception_ptr(Error(fmt::format("{} failed: {}", what_, cudaGetErrorString(s)))));
    } else if (async != ncclSuccess) {
      mark_completed(std::make_exception_ptr(Error(fmt::format("{} failed: {}", what_, ncclGetErrorString(async)))));
    } else {
      keep_.clear();
      mark_completed();
    }
  }
  void settle_error(const std::string& message) {
    std::lock_guard lock(settle_mutex_);
    if (!Work::is_completed()) mark_completed(std::make_exception_ptr(Error(message)));
  }

  std::mutex settle_mutex_;
  cudaEvent_t done_;
  cudaStream_t compute_;
  std::vector<Tensor> keep_;  // the tensors stay alive until the operation is done
  std::string what_;
  Seconds timeout_;
  ncclComm_t comm_;
  std::shared_ptr<std::atomic<bool>> aborted_;
};

}  // namespace

NcclCommunicator::NcclCommunicator(Communicator& bootstrap, int device, cudaStream_t compute, Seconds default_timeout)
    : name_(bootstrap.name()),
      world_ranks_(bootstrap.world_ranks()),
      rank_(bootstrap.rank()),
      size_(bootstrap.size()),
      device_(device),
      compute_(compute),
      default_timeout_(default_timeout) {
  TIDAL_CUDA_CALL(cudaSetDevice(device_));
  ncclUniqueId id{};
  if (rank_ == 0) TIDAL_NCCL_CALL(ncclGetUniqueId(&id));
  static_assert(sizeof(id) % 4 == 0);
  Tensor id_words = Tensor::view_of(&id, {std::int64_t(sizeof(id) / 4)}, DType::i32);
  bootstrap.broadcast(id_words, {.root = 0})->wait();
  TIDAL_NCCL_CALL(ncclCommInitRank(&comm_, size_, id, rank_));
  TIDAL_CUDA_CALL(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  void* word = nullptr;
  TIDAL_CUDA_CALL(cudaMalloc(&word, sizeof(float)));
  barrier_word_ = Tensor::view_of(word, {1}, DType::f32, Device::cuda(device_));
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_) {
    if (aborted_->load()) {
      // already torn down by ncclCommAbort
    } else {
      cudaStreamSynchronize(stream_);
      ncclCommDestroy(comm_);
    }
  }
  if (barrier_word_.raw()) cudaFree(barrier_word_.raw());
  if (stream_) cudaStreamDestroy(stream_);
}

void NcclCommunicator::check_tensor(const Tensor& t, const char* what) const {
  TIDAL_CHECK(t.defined() && t.device() == Device::cuda(device_) && t.is_contiguous(),
              "{} on group '{}' (NCCL) needs a contiguous tensor on cuda:{}, got {} on {}", what, name_, device_,
              t.defined() ? t.str() : "an undefined tensor", t.device().str());
  TIDAL_CHECK(!aborted_->load(), "{} on group '{}': the NCCL communicator was aborted after an earlier timeout", what,
              name_);
}

template <class Issue>
WorkPtr NcclCommunicator::enqueue(const std::string& kind, Seconds timeout, std::vector<Tensor> keep, Issue&& issue) {
  TIDAL_CUDA_CALL(cudaSetDevice(device_));
  cudaEvent_t ready = nullptr, done = nullptr;
  TIDAL_CUDA_CALL(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  TIDAL_CUDA_CALL(cudaEventRecord(ready, compute_));
  TIDAL_CUDA_CALL(cudaStreamWaitEvent(stream_, ready, 0));
  TIDAL_CUDA_CALL(cudaEventDestroy(ready));  // released once the wait has been enqueued
  issue();
  TIDAL_CUDA_CALL(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  TIDAL_CUDA_CALL(cudaEventRecord(done, stream_));
  const std::string what = fmt::format("{} #{} on group '{}'", kind, ++issued_, name_);
  return std::make_shared<NcclWork>(done, compute_, std::move(keep), what, timeout.count() > 0 ? timeout : default_timeout_,
                                    comm_, aborted_);
}

WorkPtr NcclCommunicator::all_reduce(Tensor& t, const AllReduceOptions& o) {
  check_tensor(t, "all_reduce");
  const ncclRedOp_t op = nccl_op(o.op, t.dtype(), "all_reduce");
  return enqueue("all_reduce", o.timeout, {t}, [&] {
    TIDAL_NCCL_CALL(ncclAllReduce(t.raw(), t.raw(), std::size_t(t.numel()), nccl_type(t.dtype()), op, comm_, stream_));
  });
}

WorkPtr NcclCommunicator::broadcast(Tensor& t, const BroadcastOptions& o) {
  check_tensor(t, "broadcast");
  TIDAL_CHECK(o.root >= 0 && o.root < size_, "broadcast on group '{}': root {} is not a rank of {}", name_, o.root, size_);
  return enqueue("broadcast", o.timeout, {t}, [&] {
    TIDAL_NCCL_CALL(ncclBroadcast(t.raw(), t.raw(), std::size_t(t.numel()), nccl_type(t.dtype()), o.root, comm_, stream_));
  });
}

WorkPtr NcclCommunicator::reduce(Tensor& t, const ReduceOptions& o) {
  check_tensor(t, "reduce");
  TIDAL_CHECK(o.root >= 0 && o.root < size_, "reduce on group '{}': root {} is not a rank of {}", name_, o.root, size_);
  const ncclRedOp_t op = nccl_op(o.op, t.dtype(), "reduce");
  return enqueue("reduce", o.timeout, {t}, [&] {
    TIDAL_NCCL_CALL(ncclReduce(t.raw(), t.raw(), std::size_t(t.numel()), nccl_type(t.dtype()), op, o.root, comm_, stream_));
  });
}

WorkPtr NcclCommunicator::all_gather(Tensor& out, const Tensor& in, const AllGatherOptions& o) {
  check_tensor(out, "all_gather");
  check_tensor(in, "all_gather");
  TIDAL_CHECK(in.dtype() == out.dtype(), "all_gather on group '{}': dtypes differ ({} and {})", name_, in.str(), out.str());
  const auto counts = gather_counts(*this, o.counts, in.numel(), out.numel(), "all_gather");
  const bool equal = std::all_of(counts.begin(), counts.end(), [&](std::int64_t c) { return c == counts[0]; });
  return enqueue("all_gather", o.timeout, {out, in}, [&] {
    if (equal) {
      TIDAL_NCCL_CALL(ncclAllGather(in.raw(), out.raw(), std::size_t(in.numel()), nccl_type(in.dtype()), comm_, stream_));
      return;
    }
    TIDAL_NCCL_CALL(ncclGroupStart());
    std::int64_t offset = 0;
    for (int r = 0; r < size_; ++r) {
      const void* send = r == rank_ ? in.raw() : nullptr;
      TIDAL_NCCL_CALL(ncclBroadcast(send, at_element(out, offset), std::size_t(counts[std::size_t(r)]),
                                    nccl_type(in.dtype()), r, comm_, stream_));
      offset += counts[std::size_t(r)];
    }
    TIDAL_NCCL_CALL(ncclGroupEnd());
  });
}

WorkPtr NcclCommunicator::reduce_scatter(Tensor& out, const Tensor& in, const ReduceScatterOptions& o) {
  check_tensor(out, "reduce_scatter");
  check_tensor(in, "reduce_scatter");
  TIDAL_CHECK(in.dtype() == out.dtype(), "reduce_scatter on group '{}': dtypes differ ({} and {})", name_, in.str(),
              out.str());
  const ncclRedOp_t op = nccl_op(o.op, in.dtype(), "reduce_scatter");
  const auto counts = gather_counts(*this, o.counts, out.numel(), in.numel(), "reduce_scatter");
  const bool equal = std::all_of(counts.begin(), counts.end(), [&](std::int64_t c) { return c == counts[0]; });
  return enqueue("reduce_scatter", o.timeout, {out, in}, [&] {
    if (equal) {
      TIDAL_NCCL_CALL(
          ncclReduceScatter(in.raw(), out.raw(), std::size_t(out.numel()), nccl_type(in.dtype()), op, comm_, stream_));
      return;
    }
    TIDAL_NCCL_CALL(ncclGroupStart());
    std::int64_t offset = 0;
    for (int r = 0; r < size_; ++r) {
      TIDAL_NCCL_CALL(ncclReduce(at_element(in, offset), r == rank_ ? out.raw() : nullptr,
                                 std::size_t(counts[std::size_t(r)]), nccl_type(in.dtype()), op, r, comm_, stream_));
      offset += counts[std::size_t(r)];
    }
    TIDAL_NCCL_CALL(ncclGroupEnd());
  });
}

WorkPtr NcclCommunicator::send(const Tensor& t, int dst, const PointToPointOptions& o) {
  check_tensor(t, "send");
  TIDAL_CHECK(dst >= 0 && dst < size_ && dst != rank_, "send on group '{}': no peer rank {}", name_, dst);
  return enqueue(fmt::format("send to {}", dst), o.timeout, {t}, [&] {
    TIDAL_NCCL_CALL(ncclSend(t.raw(), std::size_t(t.numel()), nccl_type(t.dtype()), dst, comm_, stream_));
  });
}

WorkPtr NcclCommunicator::recv(Tensor& t, int src, const PointToPointOptions& o) {
  check_tensor(t, "recv");
  TIDAL_CHECK(src >= 0 && src < size_ && src != rank_, "recv on group '{}': no peer rank {}", name_, src);
  return enqueue(fmt::format("recv from {}", src), o.timeout, {t}, [&] {
    TIDAL_NCCL_CALL(ncclRecv(t.raw(), std::size_t(t.numel()), nccl_type(t.dtype()), src, comm_, stream_));
  });
}

WorkPtr NcclCommunicator::barrier(const BarrierOptions& o) {
  return enqueue("barrier", o.timeout, {}, [&] {
    TIDAL_NCCL_CALL(ncclAllReduce(barrier_word_.raw(), barrier_word_.raw(), 1, ncclFloat32, ncclSum, comm_, stream_));
  });
}

std::shared_ptr<Communicator> nccl_on_current_gpu(Communicator& bootstrap, Seconds timeout) {
  int device = 0;
  TIDAL_CUDA_CALL(cudaGetDevice(&device));
  return std::make_shared<NcclCommunicator>(bootstrap, device, cuda::compute_stream(), timeout);
}

}  // namespace tidal::comm
