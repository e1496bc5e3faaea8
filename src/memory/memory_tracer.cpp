#include "memory/memory_tracer.h"

#include "core/error.h"

#include <algorithm>

namespace tidal::memory {

void MemoryTracer::record_moment(std::string label) {
  TIDAL_ASSERT(!finished_, "the memory trace is fixed after the warm-up");
  TIDAL_ASSERT(labels_.size() == non_model_.size(), "moment {} started before the last interval closed",
               labels_.size());
  labels_.push_back(std::move(label));
}

void MemoryTracer::record_use(int chunk) {
  TIDAL_ASSERT(!labels_.empty() && labels_.size() == non_model_.size() + 1, "a chunk used outside a moment");
  if (std::size_t(chunk) >= uses_.size()) uses_.resize(std::size_t(chunk) + 1);
  std::vector<int>& u = uses_[std::size_t(chunk)];
  const int j = int(labels_.size()) - 1;
  if (u.empty() || u.back() != j) u.push_back(j);
}

void MemoryTracer::record_operator_bytes(std::int64_t bytes) {
  TIDAL_ASSERT(!labels_.empty() && labels_.size() == non_model_.size() + 1, "chunk bytes recorded outside a moment");
  operator_.resize(labels_.size(), 0);
  operator_.back() = std::max(operator_.back(), bytes);
}

void MemoryTracer::close_interval(std::int64_t device_peak, std::int64_t chunk_bytes) {
  TIDAL_ASSERT(labels_.size() == non_model_.size() + 1, "an interval closed with no moment open");
  operator_.resize(labels_.size(), 0);
  device_.push_back(device_peak);
  chunk_.push_back(chunk_bytes);
  non_model_.push_back(std::max<std::int64_t>(0, device_peak - chunk_bytes));
  peak_non_model_ = std::max(peak_non_model_, non_model_.back());
}

void MemoryTracer::finish() {
  TIDAL_ASSERT(labels_.size() == non_model_.size(), "the warm-up ended inside a moment");
  finished_ = true;
}

std::int64_t MemoryTracer::non_model(int j) const {
  if (j < 0 || j >= moments()) return peak_non_model_;
  return non_model_[std::size_t(j)];
}

int MemoryTracer::next_use(int chunk, int j) const {
  if (std::size_t(chunk) >= uses_.size() || uses_[std::size_t(chunk)].empty()) return kNever;
  const std::vector<int>& u = uses_[std::size_t(chunk)];
  const auto it = std::upper_bound(u.begin(), u.end(), j);
  return it != u.end() ? *it : moments() + u.front();
}

MemoryTracer::Least MemoryTracer::least_limit() const {
  Least least;
  for (int j = 0; j < moments(); ++j) {
    const std::int64_t need = non_model_[std::size_t(j)] + operator_[std::size_t(j)];
    if (need > least.bytes) least = {need, j};
  }
  return least;
}

nlohmann::json MemoryTracer::json() const {
  nlohmann::json moments = nlohmann::json::array();
  for (std::size_t j = 0; j < non_model_.size(); ++j)
    moments.push_back({{"moment", j},
                       {"operator", labels_[j]},
                       {"device_bytes", device_[j]},
                       {"chunk_bytes", chunk_[j]},
                       {"operator_chunk_bytes", operator_[j]},
                       {"non_model_bytes", non_model_[j]}});
  return {{"moments", moments}, {"peak_non_model_bytes", peak_non_model_}};
}

}  // namespace tidal::memory
