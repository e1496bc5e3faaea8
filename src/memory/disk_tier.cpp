#include "memory/disk_tier.h"

#include "core/error.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace tidal::memory {

DiskTier::DiskTier(const std::string& dir, int rank, std::int64_t chunk_elements, int kinds, std::vector<int> chunks,
                   Allocator& host, bool read_ahead)
    : chunks_(std::move(chunks)),
      store_(dir, rank, std::size_t(kinds * chunk_elements) * sizeof(float), int(chunks_.size())),
      read_ahead_(read_ahead) {
  TIDAL_ASSERT(std::is_sorted(chunks_.begin(), chunks_.end()), "the disk tier's chunks must be in list order");
  for (std::size_t i = 0; i < chunks_.size(); ++i) record_[chunks_[i]] = int(i);
  if (chunks_.empty()) return;  // a directory checked at start, nothing to stage
  for (Staging& s : staging_) s.states = Tensor::empty({kinds * chunk_elements}, DType::f32, host);
}

DiskTier::~DiskTier() {
  if (reader_.joinable()) reader_.join();  // the run is ending: its error, if any, no longer matters
}

void DiskTier::count_fill(const Staging& s) {
  const auto record = std::int64_t(store_.record_bytes());
  if (s.modified) bytes_to_disk_ += record;
  bytes_from_disk_ += record;
}

void DiskTier::fill(Staging& s, int chunk) {
  if (s.modified) store_.write(record_.at(s.chunk), s.states.raw());
  s.modified = false;
  s.chunk = -1;
  store_.read(record_.at(chunk), s.states.raw());
  s.chunk = chunk;
}

void DiskTier::join_read_ahead() {
  if (reader_.joinable()) reader_.join();
  if (reader_error_) std::rethrow_exception(std::exchange(reader_error_, nullptr));
}

void DiskTier::flush() {
  join_read_ahead();
  for (Staging& s : staging_)
    if (s.modified) {
      store_.write(record_.at(s.chunk), s.states.raw());
      bytes_to_disk_ += std::int64_t(store_.record_bytes());
      s.modified = false;
    }
}

void DiskTier::read_states(int chunk, std::size_t offset, std::size_t bytes, void* into) {
  store_.read(record_.at(chunk), offset, bytes, into);
}

Tensor DiskTier::stage(int chunk, bool modify) {
  TIDAL_ASSERT(holds(chunk), "chunk {} is not in the disk tier", chunk);
  if (staging_[current_].chunk != chunk) {
    const auto start = std::chrono::steady_clock::now();
    join_read_ahead();
    current_ = 1 - current_;
    if (Staging& s = staging_[current_]; s.chunk != chunk) {  // not read ahead: now
      count_fill(s);
      fill(s, chunk);
    }
    // The next disk chunk in list order (the first after the last: the next step's Adam starts
    // there) while the caller works on this one.
    const auto after = std::upper_bound(chunks_.begin(), chunks_.end(), chunk);
    const int next = after == chunks_.end() ? chunks_.front() : *after;
    Staging& other = staging_[1 - current_];
    if (read_ahead_ && next != chunk && other.chunk != next) {
      count_fill(other);
      reader_ = std::thread([this, &other, next] {
        try {
          fill(other, next);
        } catch (...) {
          reader_error_ = std::current_exception();
        }
      });
    }
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  Staging& s = staging_[current_];
  s.modified = s.modified || modify;
  return s.states;
}

}  // namespace tidal::memory
