#include "comm/mpi_communicator.h"

#include "core/dtype.h"
#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>

namespace tidal::comm {
namespace {

// [dtype: bf16, f16][op: sum, max, min]; avg is a sum followed by a scale.
std::array<std::array<MPI_Op, 3>, 2> g_half_ops;

template <class T, ReduceOp Op>
void half_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = to_float(a[i]), y = to_float(b[i]);
    b[i] = from_float<T>(Op == ReduceOp::max ? std::max(x, y) : Op == ReduceOp::min ? std::min(x, y) : x + y);
  }
}

int op_index(ReduceOp op) { return op == ReduceOp::max ? 1 : op == ReduceOp::min ? 2 : 0; }

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::i32: return MPI_INT32_T;
    case DType::u8: return MPI_UINT8_T;
    case DType::bf16:
    case DType::f16: return MPI_UINT16_T;
  }
  TIDAL_ASSERT(false, "no MPI type for {}", dtype_name(t));
}

MPI_Op mpi_op(ReduceOp op, DType t, const char* what) {
  TIDAL_CHECK(!(op == ReduceOp::avg && t == DType::i32), "{}: reduce op avg needs a floating-point tensor, got i32",
              what);
  if (t == DType::bf16 || t == DType::f16) return g_half_ops[t == DType::bf16 ? 0 : 1][std::size_t(op_index(op))];
  return op == ReduceOp::max ? MPI_MAX : op == ReduceOp::min ? MPI_MIN : MPI_SUM;
}

int mpi_count(std::int64_t n, const char* what) {
  TIDAL_CHECK(n <= std::numeric_limits<int>::max(), "{}: {} elements exceed MPI's int count; split the buffer", what, n);
  return int(n);
}

// For avg: divide in place by the group size once the sum has arrived.
std::function<void()> scale_after(ReduceOp op, Tensor t, int size) {
  if (op != ReduceOp::avg) return nullptr;
  return [t, size]() mutable {
    const float s = 1.0f / float(size);
    const std::int64_t n = t.numel();
    switch (t.dtype()) {
      case DType::f32: for (std::int64_t i = 0; i < n; ++i) t.data<float>()[i] *= s; break;
      case DType::bf16: for (std::int64_t i = 0; i < n; ++i) t.data<bf16>()[i] = to_bf16(to_float(t.data<bf16>()[i]) * s); break;
      case DType::f16: for (std::int64_t i = 0; i < n; ++i) t.data<f16>()[i] = to_f16(to_float(t.data<f16>()[i]) * s); break;
      case DType::i32:
      case DType::u8: break;
    }
  };
}

std::vector<int> displacements(const std::vector<int>& counts) {
  std::vector<int> displ(counts.size(), 0);
  for (std::size_t i = 1; i < counts.size(); ++i) displ[i] = displ[i - 1] + counts[i - 1];
  return displ;
}

}  // namespace

void create_mpi_reductions() {
  MPI_Op_create(&half_reduce<bf16, ReduceOp::sum>, 1, &g_half_ops[0][0]);
  MPI_Op_create(&half_reduce<bf16, ReduceOp::max>, 1, &g_half_ops[0][1]);
  MPI_Op_create(&half_reduce<bf16, ReduceOp::min>, 1, &g_half_ops[0][2]);
  MPI_Op_create(&half_reduce<f16, ReduceOp::sum>, 1, &g_half_ops[1][0]);
  MPI_Op_create(&half_reduce<f16, ReduceOp::max>, 1, &g_half_ops[1][1]);
  MPI_Op_create(&half_reduce<f16, ReduceOp::min>, 1, &g_half_ops[1][2]);
}

void free_mpi_reductions() {
  for (auto& row : g_half_ops)
    for (MPI_Op& op : row) MPI_Op_free(&op);
}

MpiCommunicator::MpiCommunicator(MpiProgress& progress, std::shared_ptr<GroupInfo> group, Seconds default_timeout)
    : progress_(progress), group_(std::move(group)), default_timeout_(default_timeout) {
  // Safe on the caller's thread: MPI_Comm_rank is a local query made before any traffic here.
  MPI_Comm_rank(group_->comm, &rank_);
}

std::vector<int> MpiCommunicator::everyone() const {
  std::vector<int> all(static_cast<std::size_t>(size()));
  for (int r = 0; r < size(); ++r) all[std::size_t(r)] = r;
  return all;
}

void MpiCommunicator::check_tensor(const Tensor& t, const char* what) const {
  TIDAL_CHECK(t.defined() && t.device().is_cpu() && t.is_contiguous(),
              "{} on group '{}' (MPI) needs a contiguous host tensor, got {} on {}", what, name(),
              t.defined() ? t.str() : "an undefined tensor", t.device().str());
}

void MpiCommunicator::check_rank(int r, const char* what, const char* role) const {
  TIDAL_CHECK(r >= 0 && r < size(), "{} on group '{}': {} {} is not a rank of this group of {}", what, name(), role, r,
              size());
}

WorkPtr MpiCommunicator::submit(std::string kind, std::vector<int> waits_for, Seconds timeout,
                                std::function<void(MPI_Request*)> start, std::function<void()> finish) {
  MpiOperation op;
  op.kind = std::move(kind);
  op.seq = ++group_->issued;
  op.peer_shows = fmt::format("{} #{}", op.kind, op.seq);
  op.group = group_.get();
  op.waits_for = std::move(waits_for);
  op.timeout = timeout.count() > 0 ? timeout : default_timeout_;
  op.start = std::move(start);
  op.finish = std::move(finish);
  return progress_.submit(std::move(op));
}

WorkPtr MpiCommunicator::submit_p2p(std::string kind, std::string peer_shows, int peer, Seconds timeout,
                                    std::function<void(MPI_Request*)> start) {
  MpiOperation op;
  op.kind = std::move(kind);
  op.seq = ++group_->p2p_issued;
  op.peer_shows = std::move(peer_shows);
  op.group = group_.get();
  op.waits_for = {peer};
  op.timeout = timeout.count() > 0 ? timeout : default_timeout_;
  op.start = std::move(start);
  return progress_.submit(std::move(op));
}

WorkPtr MpiCommunicator::all_reduce(Tensor& t, const AllReduceOptions& o) {
  check_tensor(t, "all_reduce");
  const MPI_Op op = mpi_op(o.op, t.dtype(), "all_reduce");
  const int n = mpi_count(t.numel(), "all_reduce");
  MPI_Comm comm = group_->comm;
  return submit("all_reduce", everyone(), o.timeout,
                [t, n, op, comm](MPI_Request* r) { MPI_Iallreduce(MPI_IN_PLACE, t.raw(), n, mpi_type(t.dtype()), op, comm, r); },
                scale_after(o.op, t, size()));
}

WorkPtr MpiCommunicator::broadcast(Tensor& t, const BroadcastOptions& o) {
  check_tensor(t, "broadcast");
  check_rank(o.root, "broadcast", "root");
  const int n = mpi_count(t.numel(), "broadcast");
  MPI_Comm comm = group_->comm;
  const int root = o.root;
  return submit(fmt::format("broadcast from {}", root), everyone(), o.timeout,
                [t, n, root, comm](MPI_Request* r) { MPI_Ibcast(t.raw(), n, mpi_type(t.dtype()), root, comm, r); });
}

WorkPtr MpiCommunicator::reduce(Tensor& t, const ReduceOptions& o) {
  check_tensor(t, "reduce");
  check_rank(o.root, "reduce", "root");
  const MPI_Op op = mpi_op(o.op, t.dtype(), "reduce");
  const int n = mpi_count(t.numel(), "reduce");
  MPI_Comm comm = group_->comm;
  const int root = o.root;
  const bool is_root = root == rank_;
  if (size() == 2) {
    // Between two ranks, an all-reduce into scratch of the communicator's own (outside the
    // allocators, as MPI's buffers are) and the root's copy from it: Open MPI's non-blocking
    // reduce runs in more rounds than its all-reduce, each round waiting for both ranks' progress
    // threads (measured, 8 ranks on 2 cores, a 192^3 GEMM then a 300 KB reduce over pairs: 1.9 ms a
    // call above the GEMM through MPI_Ireduce, 0.1 through MPI_Iallreduce). Both ranks' tensors
    // are only read, so the non-root keeps its own.
    std::shared_ptr<std::byte[]> scratch = std::make_shared_for_overwrite<std::byte[]>(t.nbytes());  // no zero fill
    std::function<void()> scale = is_root ? scale_after(o.op, t, size()) : nullptr;
    return submit(fmt::format("reduce to {}", root), everyone(), o.timeout,
                  [t, n, op, comm, scratch](MPI_Request* r) {
                    MPI_Iallreduce(t.raw(), scratch.get(), n, mpi_type(t.dtype()), op, comm, r);
                  },
                  [t, is_root, scratch, scale]() {
                    if (!is_root) return;
                    std::memcpy(t.raw(), scratch.get(), t.nbytes());
                    if (scale) scale();
                  });
  }
  // Non-roots keep their tensor: MPI reads it as the send buffer only.
  return submit(fmt::format("reduce to {}", root), everyone(), o.timeout,
                [t, n, op, root, is_root, comm](MPI_Request* r) {
                  MPI_Ireduce(is_root ? MPI_IN_PLACE : t.raw(), is_root ? t.raw() : nullptr, n, mpi_type(t.dtype()), op,
                              root, comm, r);
                },
                is_root ? scale_after(o.op, t, size()) : nullptr);
}

WorkPtr MpiCommunicator::all_gather(Tensor& out, const Tensor& in, const AllGatherOptions& o) {
  check_tensor(out, "all_gather");
  check_tensor(in, "all_gather");
  TIDAL_CHECK(in.dtype() == out.dtype(), "all_gather on group '{}': input {} and output {} differ in dtype", name(),
              in.str(), out.str());
  const auto counts64 = gather_counts(*this, o.counts, in.numel(), out.numel(), "all_gather");
  std::vector<int> counts;
  for (std::int64_t c : counts64) counts.push_back(mpi_count(c, "all_gather"));
  MPI_Comm comm = group_->comm;
  // Non-blocking collectives read the count arrays until they complete (MPI-3.1 sec. 5.12):
  // the operation keeps them (its start function lives until completion).
  auto layout = std::make_shared<const std::array<std::vector<int>, 2>>(
      std::array<std::vector<int>, 2>{counts, displacements(counts)});
  return submit("all_gather", everyone(), o.timeout, [out, in, layout, comm](MPI_Request* r) {
    MPI_Iallgatherv(in.raw(), int(in.numel()), mpi_type(in.dtype()), out.raw(), (*layout)[0].data(),
                    (*layout)[1].data(), mpi_type(out.dtype()), comm, r);
  });
}

WorkPtr MpiCommunicator::reduce_scatter(Tensor& out, const Tensor& in, const ReduceScatterOptions& o) {
  check_tensor(out, "reduce_scatter");
  check_tensor(in, "reduce_scatter");
  TIDAL_CHECK(in.dtype() == out.dtype(), "reduce_scatter on group '{}': input {} and output {} differ in dtype",
              name(), in.str(), out.str());
  const MPI_Op op = mpi_op(o.op, in.dtype(), "reduce_scatter");
  const auto counts64 = gather_counts(*this, o.counts, out.numel(), in.numel(), "reduce_scatter");
  std::vector<int> counts;
  for (std::int64_t c : counts64) counts.push_back(mpi_count(c, "reduce_scatter"));
  MPI_Comm comm = group_->comm;
  auto kept = std::make_shared<const std::vector<int>>(std::move(counts));  // read until completion
  return submit("reduce_scatter", everyone(), o.timeout,
                [out, in, kept, op, comm](MPI_Request* r) {
                  MPI_Ireduce_scatter(in.raw(), out.raw(), kept->data(), mpi_type(in.dtype()), op, comm, r);
                },
                scale_after(o.op, out, size()));
}

WorkPtr MpiCommunicator::send(const Tensor& t, int dst, const PointToPointOptions& o) {
  check_tensor(t, "send");
  check_rank(dst, "send", "destination");
  const int n = mpi_count(t.numel(), "send");
  MPI_Comm comm = group_->comm;
  const int tag = o.tag;
  return submit_p2p(fmt::format("send to {} (tag {})", dst, tag), fmt::format("recv from {} (tag {})", rank_, tag), dst,
                    o.timeout, [t, n, dst, tag, comm](MPI_Request* r) {
                      MPI_Isend(t.raw(), n, mpi_type(t.dtype()), dst, tag, comm, r);
                    });
}

WorkPtr MpiCommunicator::recv(Tensor& t, int src, const PointToPointOptions& o) {
  check_tensor(t, "recv");
  check_rank(src, "recv", "source");
  const int n = mpi_count(t.numel(), "recv");
  MPI_Comm comm = group_->comm;
  const int tag = o.tag;
  return submit_p2p(fmt::format("recv from {} (tag {})", src, tag), fmt::format("send to {} (tag {})", rank_, tag), src,
                    o.timeout, [t, n, src, tag, comm](MPI_Request* r) {
                      MPI_Irecv(t.raw(), n, mpi_type(t.dtype()), src, tag, comm, r);
                    });
}

WorkPtr MpiCommunicator::barrier(const BarrierOptions& o) {
  MPI_Comm comm = group_->comm;
  return submit("barrier", everyone(), o.timeout, [comm](MPI_Request* r) { MPI_Ibarrier(comm, r); });
}

}  // namespace tidal::comm
