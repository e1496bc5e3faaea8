// CountingCommunicator: a Communicator that forwards to another and records, per operation
// kind, the calls, the elements handed in, the bytes this rank sends, and the time from call to
// completion. Metrics and tests read it (colossal-ai.txt Table I gives per-mode volumes).
//
// bytes_sent models the bandwidth-optimal algorithms, independent of what the library picks:
// with p ranks and a buffer of n bytes, all-reduce sends 2(p-1)/p n, all-gather and
// reduce-scatter (p-1)/p of the full buffer, broadcast n from the root (0 elsewhere), reduce n
// from every non-root, send n.
//
// link_bytes is the operation's bandwidth term in the cost model patrickstar-v1 sec. 6.2 uses
// (Thakur, Rabenseifner, Gropp): the bytes through the busiest rank's link, so that time is
// about link_bytes / bandwidth. All-reduce 2(p-1)/p n; all-gather and reduce-scatter (p-1)/p of
// the full buffer; broadcast 2(p-1)/p n (a scatter, then an all-gather: the root sends both) and
// reduce 2(p-1)/p n (a reduce-scatter, then a gather: the root receives both); send n (its recv
// 0, the transfer is counted once). It is the same on every rank of a collective.
#pragma once

#include "comm/communicator.h"

#include <map>
#include <memory>
#include <mutex>
#include <string_view>

namespace tidal::comm {

// The bytes an operation moves by the formulas above: `op` ("all_reduce", "broadcast", "reduce",
// "all_gather", "reduce_scatter", "send", "recv", "barrier") over `p` ranks, `nbytes` the buffer
// the formula counts (all-gather: the gathered output; reduce-scatter: the whole input; the
// others: the tensor), `root` whether this rank is the broadcast's or reduce's root. The cost
// model (sim/) counts a step's volumes with it.
struct Volume {
  double bytes_sent = 0, link_bytes = 0;
};
Volume volume(std::string_view op, int p, double nbytes, bool root = false);

struct OperationStats {
  std::int64_t calls = 0;
  std::int64_t elements = 0;
  double bytes_sent = 0;
  double link_bytes = 0;
  double seconds = 0;  // summed call-to-completion time
};

class CountingCommunicator final : public Communicator {
 public:
  explicit CountingCommunicator(std::shared_ptr<Communicator> inner) : inner_(std::move(inner)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }
  const std::vector<int>& world_ranks() const override { return inner_->world_ranks(); }

  WorkPtr all_reduce(Tensor& t, const AllReduceOptions& options = {}) override;
  WorkPtr broadcast(Tensor& t, const BroadcastOptions& options = {}) override;
  WorkPtr reduce(Tensor& t, const ReduceOptions& options = {}) override;
  WorkPtr all_gather(Tensor& out, const Tensor& in, const AllGatherOptions& options = {}) override;
  WorkPtr reduce_scatter(Tensor& out, const Tensor& in, const ReduceScatterOptions& options = {}) override;
  WorkPtr send(const Tensor& t, int dst, const PointToPointOptions& options = {}) override;
  WorkPtr recv(Tensor& t, int src, const PointToPointOptions& options = {}) override;
  WorkPtr barrier(const BarrierOptions& options = {}) override;

  // Stats so far, by operation kind ("all_reduce", ...). Completed operations only for seconds.
  std::map<std::string, OperationStats> stats() const;
  void reset();

 private:
  WorkPtr record(const char* kind, std::int64_t elements, double bytes_sent, double link_bytes, WorkPtr work);

  std::shared_ptr<Communicator> inner_;
  mutable std::mutex mutex_;
  std::map<std::string, OperationStats> stats_;
};

}  // namespace tidal::comm
