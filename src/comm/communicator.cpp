#include "comm/communicator.h"

#include "core/error.h"
#include "core/profile.h"

#include <numeric>

namespace tidal::comm {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

std::vector<std::int64_t> split_counts(std::int64_t n, int parts) {
  TIDAL_ASSERT(parts >= 1 && n >= 0, "split_counts({}, {})", n, parts);
  std::vector<std::int64_t> counts(std::size_t(parts), n / parts);
  for (std::int64_t r = 0; r < n % parts; ++r) ++counts[std::size_t(r)];
  return counts;
}

std::vector<std::int64_t> gather_counts(const Communicator& c, const std::vector<std::int64_t>& counts,
                                        std::int64_t local, std::int64_t total, const char* what) {
  if (counts.empty()) {
    TIDAL_CHECK(total == local * c.size(),
                "{} on group '{}': {} elements do not split into {} equal parts of {}; pass counts "
                "(comm::split_counts) for uneven parts",
                what, c.name(), total, c.size(), local);
    return std::vector<std::int64_t>(std::size_t(c.size()), local);
  }
  TIDAL_CHECK(int(counts.size()) == c.size(), "{} on group '{}': {} counts for {} ranks", what, c.name(),
              counts.size(), c.size());
  TIDAL_CHECK(counts[std::size_t(c.rank())] == local, "{} on group '{}': rank {} has {} elements but counts say {}",
              what, c.name(), c.rank(), local, counts[std::size_t(c.rank())]);
  TIDAL_CHECK(std::accumulate(counts.begin(), counts.end(), std::int64_t{0}) == total,
              "{} on group '{}': counts add up to {}, the full tensor has {}", what, c.name(),
              std::accumulate(counts.begin(), counts.end(), std::int64_t{0}), total);
  return counts;
}

bool Work::is_completed() {
  std::lock_guard lock(mutex_);
  return settled_;
}

void Work::wait() {
  const OpTimer timer(OpFamily::communication);
  std::unique_lock lock(mutex_);
  done_cv_.wait(lock, [&] { return settled_; });
  if (error_) std::rethrow_exception(error_);
}

std::exception_ptr Work::error() {
  std::lock_guard lock(mutex_);
  return error_;
}

void Work::on_completion(std::function<void(const Work&)> callback) {
  {
    std::lock_guard lock(mutex_);
    if (!done_) {
      callbacks_.push_back(std::move(callback));
      return;
    }
  }
  callback(*this);
}

void Work::mark_completed(std::exception_ptr error) {
  std::vector<std::function<void(const Work&)>> callbacks;
  {
    std::lock_guard lock(mutex_);
    TIDAL_ASSERT(!done_, "a Work completed twice");
    completed_at_ = Clock::now();
    error_ = error;
    done_ = true;
    callbacks.swap(callbacks_);
  }
  // Callbacks run before waiters wake, so a caller that has waited sees their effects; one
  // added meanwhile (done_ is set) runs at once on its caller's thread.
  for (auto& cb : callbacks) cb(*this);
  {
    std::lock_guard lock(mutex_);
    settled_ = true;
  }
  done_cv_.notify_all();
}

}  // namespace tidal::comm
