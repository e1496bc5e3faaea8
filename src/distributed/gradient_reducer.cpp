#include "distributed/gradient_reducer.h"

#include "core/error.h"

#include <algorithm>

namespace tidal::distributed {
namespace {

// Adds the uses of the parameters already keys of `uses`.
void count_uses(nn::Module& m, std::unordered_map<nn::Parameter*, int>& uses) {
  for (nn::Parameter* p : m.used_parameters())
    if (auto it = uses.find(p); it != uses.end()) ++it->second;
  for (auto& [name, child] : m.children()) count_uses(*child, uses);
}

double seconds(comm::Work::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

GradientReducer::GradientReducer(models::Model& model, comm::Communicator& data_group, std::int64_t bucket_bytes,
                                 Allocator& alloc)
    : GradientReducer({&model}, model.parameters(), data_group, bucket_bytes, alloc) {}

GradientReducer::GradientReducer(const std::vector<nn::Module*>& roots, std::vector<nn::Parameter*> params,
                                 comm::Communicator& data_group, std::int64_t bucket_bytes, Allocator& alloc)
    : group_(data_group) {
  for (nn::Parameter* p : params) uses_[p] = 0;
  for (nn::Module* root : roots) count_uses(*root, uses_);
  std::reverse(params.begin(), params.end());
  // Group parameters into buckets of at least bucket_bytes (the last may be smaller).
  std::vector<std::vector<nn::Parameter*>> groups(1);
  std::int64_t bytes = 0;
  for (nn::Parameter* p : params) {
    TIDAL_ASSERT(p->grad.defined() && p->grad.dtype() == DType::f32, "parameter {} has no fp32 grad", p->name);
    TIDAL_ASSERT(uses_.at(p) > 0, "parameter {} is used by no module", p->name);
    if (bytes >= bucket_bytes) {
      groups.emplace_back();
      bytes = 0;
    }
    groups.back().push_back(p);
    bytes += std::int64_t(p->grad.nbytes());
  }
  for (auto& g : groups) {
    std::int64_t n = 0;
    for (nn::Parameter* p : g) n += p->grad.numel();
    Bucket b;
    b.flat = Tensor::zeros({n}, DType::f32, alloc);
    std::int64_t offset = 0;
    for (nn::Parameter* p : g) {
      Tensor view = b.flat.slice(0, offset, offset + p->grad.numel()).reshape(p->grad.shape());
      view.copy_from(p->grad);
      p->grad = view;
      offset += view.numel();
      bucket_of_[p] = int(buckets_.size());
    }
    b.params = g;
    buckets_.push_back(std::move(b));
  }
}

void GradientReducer::set_sync(bool sync) {
  sync_ = sync;
  if (!sync) return;
  remaining_ = uses_;
  for (Bucket& b : buckets_) {
    b.pending = int(b.params.size());
    b.work = nullptr;
  }
}

void GradientReducer::after_backward(nn::Module& m) {
  if (!sync_) return;
  for (nn::Parameter* p : m.used_parameters()) {
    auto it = remaining_.find(p);
    if (it == remaining_.end() || --it->second != 0) continue;
    Bucket& b = buckets_[std::size_t(bucket_of_.at(p))];
    if (--b.pending == 0) launch(b);
  }
}

void GradientReducer::launch(Bucket& b) { b.work = group_.all_reduce(b.flat); }

void GradientReducer::finish() {
  if (!sync_) return;
  for (Bucket& b : buckets_) {
    if (!b.work) launch(b);
  }
  const auto backward_end = comm::Work::Clock::now();
  std::vector<std::pair<comm::Work::Clock::time_point, comm::Work::Clock::time_point>> spans;
  for (Bucket& b : buckets_) {
    b.work->wait();
    spans.emplace_back(b.work->issued_at(), b.work->completed_at());
  }
  // The union of the in-flight intervals, and how much of it lies after backward ended.
  std::sort(spans.begin(), spans.end());
  comm_seconds_ = 0;
  auto covered = spans.front().first;
  auto last_end = covered;
  for (const auto& [begin, end] : spans) {
    const auto from = std::max(begin, covered);
    if (end > from) comm_seconds_ += seconds(end - from);
    covered = std::max(covered, end);
    last_end = std::max(last_end, end);
  }
  exposed_seconds_ = last_end > backward_end ? seconds(last_end - backward_end) : 0.0;
  sync_ = false;
}

}  // namespace tidal::distributed
