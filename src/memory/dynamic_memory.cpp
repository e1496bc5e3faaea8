#include "memory/dynamic_memory.h"

#include "core/error.h"
#include "core/gpu.h"

#include <algorithm>
#include <chrono>

namespace tidal::memory {
namespace {

constexpr ChunkKind kOptimizerKinds[] = {ChunkKind::master, ChunkKind::momentum, ChunkKind::variance,
                                         ChunkKind::grad};

std::string mib(std::int64_t bytes) { return fmt::format("{:.1f} MiB", double(bytes) / double(1 << 20)); }

}  // namespace

std::int64_t DynamicMemory::device_peak_bytes() const {
  return std::max(device_peak_, std::int64_t(device_.peak_bytes()));
}

DynamicMemory::DynamicMemory(const OffloadOptions& options, Allocator& device, Allocator& host, Lists& lists,
                             std::function<bool(int)> busy)
    : options_(options), device_(device), device_chunks_(device), host_(host), lists_(lists), busy_(std::move(busy)) {
  TIDAL_CHECK(options_.warmup_fraction > 0 && options_.warmup_fraction <= 1,
              "memory.warmup_fraction must be in (0, 1], got {}", options_.warmup_fraction);
  if (options_.partition == Partition::dynamic) device_.set_reclaimer([this](std::size_t over) { reclaim(over); });
}

DynamicMemory::~DynamicMemory() {
  if (options_.partition == Partition::dynamic) device_.set_reclaimer({});
  if (warmup_limit_ >= 0) device_.set_capacity(std::size_t(warmup_limit_));
}

Allocator& DynamicMemory::initial(ChunkKind kind) {
  return kind == ChunkKind::param && options_.partition == Partition::fixed ? static_cast<Allocator&>(device_chunks_)
                                                                             : host_;
}

MemoryTier DynamicMemory::where(ChunkKind kind, int chunk) const {
  if (on_disk(kind, chunk)) return MemoryTier::disk;  // staged or not: the file is its home
  const Tensor& payload = lists_.at(kind)[std::size_t(chunk)];
  return payload.allocator() == &device_chunks_ ? MemoryTier::device : MemoryTier::host;
}

void DynamicMemory::keep_on_disk(std::vector<int> chunks, std::int64_t chunk_elements, int rank) {
  TIDAL_ASSERT(!disk_ && !options_.disk_dir.empty(), "a disk tier without memory.disk_dir, or a second one");
  disk_ = std::make_unique<DiskTier>(options_.disk_dir, rank, chunk_elements, int(std::size(kDiskKinds)),
                                     std::move(chunks), host_, options_.disk_read_ahead);
}

bool DynamicMemory::on_disk(ChunkKind kind, int chunk) const {
  return disk_ && disk_->holds(chunk) &&
         std::find(std::begin(kDiskKinds), std::end(kDiskKinds), kind) != std::end(kDiskKinds);
}

void DynamicMemory::stage_states(int chunk, bool modify) {
  if (!on_disk(ChunkKind::master, chunk)) return;
  if (staged_ != chunk) unstage_states();
  const Tensor states = disk_->stage(chunk, modify);
  const std::int64_t C = states.numel() / std::int64_t(std::size(kDiskKinds));
  for (std::size_t k = 0; k < std::size(kDiskKinds); ++k)
    lists_.at(kDiskKinds[k])[std::size_t(chunk)] = states.slice(0, std::int64_t(k) * C, std::int64_t(k + 1) * C);
  staged_ = chunk;
}

void DynamicMemory::unstage_states() {
  if (staged_ < 0) return;
  // The staging buffer keeps the states (disk_tier.h); the lists stop showing them, so nothing
  // reads them once the buffer holds another chunk's.
  for (ChunkKind k : kDiskKinds) lists_.at(k)[std::size_t(staged_)] = Tensor();
  staged_ = -1;
}

MoveStats DynamicMemory::stats() const {
  MoveStats out = stats_;
  if (disk_) {
    out.bytes_to_disk = disk_->bytes_to_disk();
    out.bytes_from_disk = disk_->bytes_from_disk();
    out.disk_seconds = disk_->seconds();
  }
  return out;
}

void DynamicMemory::move(ChunkKind kind, int chunk, MemoryTier to) {
  TIDAL_ASSERT(!on_disk(kind, chunk), "chunk {} of {} lives on disk: it does not move", chunk, chunk_kind_name(kind));
  Tensor& payload = lists_.at(kind)[std::size_t(chunk)];
  if (!payload.defined() || where(kind, chunk) == to) return;
  const auto start = std::chrono::steady_clock::now();
  Allocator& target = to == MemoryTier::device ? static_cast<Allocator&>(device_chunks_) : host_;
  Tensor moved = Tensor::empty(payload.shape(), payload.dtype(), target);
  if (moved.device().is_cuda() || payload.device().is_cuda()) {
    // On a GPU: on the copy stream, the host not waiting (a chunk sent to the host is waited for
    // once its moment's evictions are queued: host_copies_pending_). The old payload's block is
    // freed behind the copy: device memory on the compute stream, which waits for the copy; a
    // host block is kept until the host has waited for the copy stream (the CPU could write it
    // again through a new owner).
    copy_bytes_on_copy_stream(moved.raw(), moved.device(), payload.raw(), payload.device(), moved.nbytes());
    if (moved.device().is_cpu()) host_copies_pending_ = true;
    else retired_.push_back(payload);
  } else {
    moved.copy_from(payload);
  }
  payload = moved;
  (to == MemoryTier::device ? stats_.bytes_to_device : stats_.bytes_to_host) += std::int64_t(moved.nbytes());
  stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void DynamicMemory::begin_iteration() {
  TIDAL_ASSERT(!in_iteration_, "an iteration began inside another");
  in_iteration_ = true;
  moment_ = -1;
}

void DynamicMemory::end_iteration() {
  TIDAL_ASSERT(!in_moment_, "an iteration ended inside a moment");
  if (!in_iteration_) return;  // a step without zero_grad: nothing traced
  if (!tracer_.finished() && moment_ >= 0) {
    tracer_.close_interval(std::int64_t(device_.peak_bytes()), device_chunk_bytes());
    tracer_.finish();
    end_warmup();
    if (options_.partition == Partition::dynamic) place_optimizer_states();
  }
  // The iteration's last copies done: the host blocks they read may have new owners.
  host_copies_pending_ = host_copies_pending_ || !retired_.empty();
  wait_for_host_copies();
  in_iteration_ = false;
  moment_ = -1;
}

void DynamicMemory::begin_moment(const std::string& label) {
  TIDAL_ASSERT(!in_moment_, "a moment began inside another");
  in_moment_ = true;
  ++tick_;
  if (!in_iteration_) return;  // evaluation: placed like a moment, not traced
  if (!tracer_.finished() && moment_ >= 0) tracer_.close_interval(std::int64_t(device_.peak_bytes()), device_chunk_bytes());
  ++moment_;
  if (!tracer_.finished()) tracer_.record_moment(label);
}

void DynamicMemory::end_moment() {
  TIDAL_ASSERT(in_moment_, "a moment ended that did not begin");
  in_moment_ = false;
  pinned_.clear();
  device_peak_ = std::max(device_peak_, std::int64_t(device_.peak_bytes()));
  device_.reset_peak();  // the interval's peak starts from the chunks as placed
}

std::int64_t DynamicMemory::param_bytes_on_device() const {
  std::int64_t bytes = 0;
  const std::vector<Tensor>& params = lists_.at(ChunkKind::param);
  for (int c = 0; c < int(params.size()); ++c)
    if (params[std::size_t(c)].defined() && where(ChunkKind::param, c) == MemoryTier::device)
      bytes += std::int64_t(params[std::size_t(c)].nbytes());
  return bytes;
}

void DynamicMemory::reclaim(std::size_t over) {
  // The tier is about to pass L: chunks no operator computes with now go to the host, chosen as
  // to_device chooses, while there are any.
  const std::vector<Tensor>& params = lists_.at(ChunkKind::param);
  std::int64_t freed = 0;
  while (freed < std::int64_t(over)) {
    std::vector<int> candidates;
    for (int c = 0; c < int(params.size()); ++c)
      if (params[std::size_t(c)].defined() && where(ChunkKind::param, c) == MemoryTier::device && !pinned_.count(c) &&
          !busy_(c))
        candidates.push_back(c);
    if (candidates.empty()) break;
    const int out = victim(candidates);
    freed += std::int64_t(params[std::size_t(out)].nbytes());
    move(ChunkKind::param, out, MemoryTier::host);
    ++stats_.evictions;
  }
  // Nothing more can go: the warm-up goes on past L to trace what the run needs, and its end
  // says whether L will do (end_warmup); afterwards the allocation fails.
  if (freed < std::int64_t(over) && !tracer_.finished() && warmup_limit_ < 0) {
    warmup_limit_ = limit();
    device_.set_capacity(std::numeric_limits<std::size_t>::max());
  }
}

void DynamicMemory::end_warmup() {
  if (warmup_limit_ >= 0) device_.set_capacity(std::size_t(warmup_limit_));
  warmup_limit_ = -1;
}

std::int64_t DynamicMemory::least_device_limit() const {
  return options_.partition == Partition::dynamic && tracer_.finished() ? tracer_.least_limit().bytes : 0;
}

std::string DynamicMemory::least_device_limit_reason() const {
  const MemoryTracer::Least least = tracer_.least_limit();
  if (least.moment < 0) return "";
  return fmt::format("the warm-up iteration traced {} of non-model data (activations, gradients in flight, "
                     "workspaces) beside the {} of chunks that '{}' computes with",
                     mib(tracer_.non_model(least.moment)), mib(tracer_.operator_bytes(least.moment)),
                     tracer_.label(least.moment));
}

std::int64_t DynamicMemory::limit() const {
  if (warmup_limit_ >= 0) return warmup_limit_;
  return std::int64_t(std::min<std::size_t>(device_.capacity(), std::numeric_limits<std::int64_t>::max()));
}

std::int64_t DynamicMemory::chunk_budget() const {
  // sec. 6.1 / patrickstar-v2's warm-up: at most the warm-up fraction of L, and never the room the
  // non-model data holds now.
  if (!tracer_.finished())
    return std::min(std::int64_t(options_.warmup_fraction * double(limit())),
                    limit() - (std::int64_t(device_.current_bytes()) - device_chunk_bytes()));
  // sec. 7.3: the room the non-model data needs during the coming interval stays free. Outside
  // an iteration (evaluation) the largest of them.
  const std::int64_t non_model = in_iteration_ ? tracer_.non_model(moment_) : tracer_.peak_non_model();
  const std::int64_t optimizer_on_device = device_chunk_bytes() - param_bytes_on_device();
  return limit() - non_model - optimizer_on_device;
}

int DynamicMemory::victim(const std::vector<int>& candidates) const {
  if (!tracer_.finished())  // the warm-up: list order
    return *std::min_element(candidates.begin(), candidates.end());
  if (options_.eviction == Eviction::lru)
    return *std::min_element(candidates.begin(), candidates.end(), [&](int a, int b) {
      return last_use_[std::size_t(a)] < last_use_[std::size_t(b)];
    });
  // Belady: the chunk whose next use is furthest away (O(C log T) for C candidates).
  const int now = in_iteration_ ? moment_ : -1;
  return *std::max_element(candidates.begin(), candidates.end(), [&](int a, int b) {
    return tracer_.next_use(a, now) < tracer_.next_use(b, now);
  });
}

void DynamicMemory::to_device(std::vector<int> chunks) {
  std::sort(chunks.begin(), chunks.end());
  chunks.erase(std::unique(chunks.begin(), chunks.end()), chunks.end());
  std::vector<Tensor>& params = lists_.at(ChunkKind::param);
  if (last_use_.size() < params.size()) last_use_.resize(params.size(), 0);
  std::int64_t need = 0;
  for (int c : chunks) {
    last_use_[std::size_t(c)] = tick_;
    if (in_iteration_ && !tracer_.finished()) tracer_.record_use(c);
    if (in_moment_) pinned_.insert(c);
    if (where(ChunkKind::param, c) != MemoryTier::device) need += std::int64_t(params[std::size_t(c)].nbytes());
  }
  if (options_.partition == Partition::dynamic) {
    // sec. 7.3: C + O must fit A, the room the coming interval's non-model data leaves; HOLD-like
    // chunks this operator does not use go to the host until it does.
    const std::int64_t budget = chunk_budget();
    std::int64_t held = param_bytes_on_device();
    while (held + need > budget) {
      std::vector<int> candidates;
      for (int c = 0; c < int(params.size()); ++c)
        if (params[std::size_t(c)].defined() && where(ChunkKind::param, c) == MemoryTier::device && !pinned_.count(c) &&
            !std::binary_search(chunks.begin(), chunks.end(), c) && !busy_(c))
          candidates.push_back(c);
      // The warm-up places them anyway (its end says what the run needs: end_warmup).
      if (candidates.empty() && (need == 0 || !tracer_.finished())) break;
      if (candidates.empty()) {
        throw OutOfMemory(fmt::format(
            "the device tier is too small for this operator: its chunks need {} on the device, and the chunks may "
            "take {} now ({}; memory.device_limit = {}); raise memory.device_limit, or make memory.chunk_size "
            "smaller",
            mib(held + need), mib(budget),
            tracer_.finished() ? "the limit less the non-model data traced for this moment and the optimizer states "
                                 "placed on the device"
                               : fmt::format("memory.warmup_fraction = {} of it during the warm-up iteration",
                                             options_.warmup_fraction),
            mib(limit())));
      }
      const int out = victim(candidates);
      move(ChunkKind::param, out, MemoryTier::host);
      ++stats_.evictions;
      held -= std::int64_t(params[std::size_t(out)].nbytes());
    }
  }
  for (int c : chunks) move(ChunkKind::param, c, MemoryTier::device);
  if (in_iteration_ && !tracer_.finished() && moment_ >= 0) {  // the operator's chunks (end_warmup)
    std::int64_t bytes = 0;
    for (int c : pinned_) bytes += std::int64_t(params[std::size_t(c)].nbytes());
    tracer_.record_operator_bytes(bytes);
  }
  wait_for_host_copies();
}

void DynamicMemory::wait_for_host_copies() {
  if (!host_copies_pending_) return;
  const auto start = std::chrono::steady_clock::now();
  wait_for_copies();
  host_copies_pending_ = false;
  retired_.clear();
  stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void DynamicMemory::to_optimizer_side(int chunk) {
  if (where(ChunkKind::master, chunk) == MemoryTier::device) {
    to_device({chunk});
  } else {
    move(ChunkKind::param, chunk, MemoryTier::host);
    stage_states(chunk, true);  // from disk, Adam's update going back
  }
  wait_for_host_copies();  // Adam on the host reads it next
}

void DynamicMemory::after_step() {
  unstage_states();
  if (options_.partition != Partition::fixed) return;
  for (int c = 0; c < int(lists_.at(ChunkKind::param).size()); ++c)
    if (lists_.at(ChunkKind::param)[std::size_t(c)].defined()) to_device({c});
}

void DynamicMemory::place_optimizer_states() {
  // sec. 7.2: the margin is what the param list and the peak non-model data leave.
  std::int64_t param_bytes = 0;
  for (const Tensor& t : lists_.at(ChunkKind::param))
    if (t.defined()) param_bytes += std::int64_t(t.nbytes());
  std::int64_t margin = limit() - tracer_.peak_non_model() - param_bytes;
  const int chunks = int(lists_.at(ChunkKind::master).size());
  for (int c = 0; c < chunks; ++c) {
    std::int64_t trio = 0;
    for (ChunkKind k : kOptimizerKinds)
      if (lists_.count(k) && lists_.at(k)[std::size_t(c)].defined()) trio += std::int64_t(lists_.at(k)[std::size_t(c)].nbytes());
    if (trio == 0 || on_disk(ChunkKind::master, c)) continue;  // not this rank's, or decided at start
    if (trio > margin) break;
    for (ChunkKind k : kOptimizerKinds)
      if (lists_.count(k)) move(k, c, MemoryTier::device);
    margin -= trio;
  }
}

nlohmann::json DynamicMemory::json() const {
  nlohmann::json out = {{"bytes_to_device", stats_.bytes_to_device},
                        {"bytes_to_host", stats_.bytes_to_host},
                        {"evictions", stats_.evictions},
                        {"move_seconds", stats_.seconds},
                        {"device_chunk_bytes", device_chunk_bytes()},
                        {"device_peak_bytes", device_peak_bytes()}};
  if (tracer_.finished() && options_.partition == Partition::dynamic)
    out["least_device_limit_bytes"] = tracer_.least_limit().bytes;
  if (!disk_) return out;
  const MoveStats now = stats();
  out["disk"] = {{"file_bytes", disk_->store().file_bytes()},
                 {"chunks", disk_->chunks().size()},
                 {"bytes_to_disk", now.bytes_to_disk},
                 {"bytes_from_disk", now.bytes_from_disk},
                 {"disk_seconds", now.disk_seconds}};
  return out;
}

}  // namespace tidal::memory
