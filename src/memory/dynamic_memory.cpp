#include "memory/dynamic_memory.h"

#include "core/error.h"
#include "core/gpu.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

namespace tidal::memory {
namespace {

constexpr ChunkKind kOptimizerKinds[] = {ChunkKind::master, ChunkKind::momentum, ChunkKind::variance,
                                         ChunkKind::grad};

std::string mib(std::int64_t bytes) { return fmt::format("{:.1f} MiB", double(bytes) / double(1 << 20)); }

}  // namespace

std::int64_t DynamicMemory::device_peak_bytes() const {
  return std::max(device_peak_, std::int64_t(device_.peak_bytes()));
}

DynamicMemory::DynamicMemory(const OffloadOptions& options, Allocator& device, Allocator& host)
    : options_(options), device_(device), device_chunks_(device), host_(host) {
  TIDAL_CHECK(options_.warmup_fraction > 0 && options_.warmup_fraction <= 1,
              "memory.warmup_fraction must be in (0, 1], got {}", options_.warmup_fraction);
  if (options_.partition == Partition::dynamic) device_.set_reclaimer([this](std::size_t over) { reclaim(over); });
}

DynamicMemory::~DynamicMemory() {
  if (options_.partition == Partition::dynamic) device_.set_reclaimer({});
  if (warmup_limit_ >= 0) device_.set_capacity(std::size_t(warmup_limit_));
}

int DynamicMemory::join(Lists& lists, int chunks, std::function<bool(int)> busy, std::function<bool(int)> remote,
                        std::int64_t host_staging) {
  TIDAL_ASSERT(!in_iteration_ && !tracer_.finished(), "a chunk manager joined the dynamic memory after the warm-up began");
  keepers_.push_back(Keeper{.lists = &lists,
                            .first = chunks_,
                            .chunks = chunks,
                            .busy = std::move(busy),
                            .remote = std::move(remote),
                            .host_staging = host_staging});
  chunks_ += chunks;
  return int(keepers_.size()) - 1;
}

void DynamicMemory::leave(int keeper) {
  unstage_states(keeper);
  keepers_.at(std::size_t(keeper)).lists = nullptr;
}

DynamicMemory::Keeper& DynamicMemory::keeper_of(int chunk) {
  return const_cast<Keeper&>(std::as_const(*this).keeper_of(chunk));
}

const DynamicMemory::Keeper& DynamicMemory::keeper_of(int chunk) const {
  for (const Keeper& k : keepers_)
    if (chunk >= k.first && chunk < k.first + k.chunks) return k;
  TIDAL_ASSERT(false, "chunk {} of the dynamic memory's {}", chunk, chunks_);
  return keepers_.front();
}

Tensor* DynamicMemory::payload(ChunkKind kind, int chunk) {
  return const_cast<Tensor*>(std::as_const(*this).payload(kind, chunk));
}

const Tensor* DynamicMemory::payload(ChunkKind kind, int chunk) const {
  const Keeper& k = keeper_of(chunk);
  if (!k.lists) return nullptr;
  const auto list = k.lists->find(kind);
  return list == k.lists->end() ? nullptr : &list->second.at(std::size_t(chunk - k.first));
}

Allocator& DynamicMemory::initial(ChunkKind kind) {
  return kind == ChunkKind::param && options_.partition == Partition::fixed ? static_cast<Allocator&>(device_chunks_)
                                                                             : host_;
}

MemoryTier DynamicMemory::where(int keeper, ChunkKind kind, int chunk) const {
  return where(kind, keepers_.at(std::size_t(keeper)).first + chunk);
}

MemoryTier DynamicMemory::where(ChunkKind kind, int chunk) const {
  if (on_disk(kind, chunk)) return MemoryTier::disk;  // staged or not: the file is its home
  const Tensor* t = payload(kind, chunk);
  return t && t->allocator() == &device_chunks_ ? MemoryTier::device : MemoryTier::host;
}

void DynamicMemory::keep_on_disk(int keeper, std::vector<int> chunks, std::int64_t chunk_elements, int rank) {
  Keeper& k = keepers_.at(std::size_t(keeper));
  TIDAL_ASSERT(!k.disk && !options_.disk_dir.empty(), "a disk tier without memory.disk_dir, or a second one");
  k.disk = std::make_unique<DiskTier>(options_.disk_dir, rank, chunk_elements, int(std::size(kDiskKinds)),
                                      std::move(chunks), host_, options_.disk_read_ahead);
}

bool DynamicMemory::on_disk(int keeper, ChunkKind kind, int chunk) const {
  return on_disk(kind, keepers_.at(std::size_t(keeper)).first + chunk);
}

bool DynamicMemory::on_disk(ChunkKind kind, int chunk) const {
  const Keeper& k = keeper_of(chunk);
  return k.disk && k.disk->holds(chunk - k.first) &&
         std::find(std::begin(kDiskKinds), std::end(kDiskKinds), kind) != std::end(kDiskKinds);
}

void DynamicMemory::stage_states(int keeper, int chunk, bool modify) {
  if (!on_disk(keeper, ChunkKind::master, chunk)) return;
  Keeper& k = keepers_.at(std::size_t(keeper));
  if (k.staged != chunk) unstage_states(keeper);
  const Tensor states = k.disk->stage(chunk, modify);
  const std::int64_t C = states.numel() / std::int64_t(std::size(kDiskKinds));
  for (std::size_t i = 0; i < std::size(kDiskKinds); ++i)
    k.lists->at(kDiskKinds[i])[std::size_t(chunk)] = states.slice(0, std::int64_t(i) * C, std::int64_t(i + 1) * C);
  k.staged = chunk;
}

void DynamicMemory::unstage_states(int keeper) {
  Keeper& k = keepers_.at(std::size_t(keeper));
  if (k.staged < 0) return;
  // The staging buffer keeps the states (disk_tier.h); the lists stop showing them, so nothing
  // reads them once the buffer holds another chunk's.
  for (ChunkKind kind : kDiskKinds) k.lists->at(kind)[std::size_t(k.staged)] = Tensor();
  k.staged = -1;
}

bool DynamicMemory::has_disk() const {
  return std::any_of(keepers_.begin(), keepers_.end(), [](const Keeper& k) { return k.disk != nullptr; });
}

MoveStats DynamicMemory::stats() const {
  MoveStats out = stats_;
  for (const Keeper& k : keepers_)
    if (k.disk) {
      out.bytes_to_disk += k.disk->bytes_to_disk();
      out.bytes_from_disk += k.disk->bytes_from_disk();
      out.disk_seconds += k.disk->seconds();
    }
  return out;
}

void DynamicMemory::move(ChunkKind kind, int chunk, MemoryTier to) {
  TIDAL_ASSERT(!on_disk(kind, chunk), "chunk {} of {} lives on disk: it does not move", chunk, chunk_kind_name(kind));
  Tensor* here = payload(kind, chunk);
  if (!here || !here->defined() || where(kind, chunk) == to) return;
  const auto start = std::chrono::steady_clock::now();
  Allocator& target = to == MemoryTier::device ? static_cast<Allocator&>(device_chunks_) : host_;
  Tensor moved = Tensor::empty(here->shape(), here->dtype(), target);
  if (moved.device().is_cuda() || here->device().is_cuda()) {
    // On a GPU: on the copy stream, the host not waiting (a chunk sent to the host is waited for
    // once its moment's evictions are queued: host_copies_pending_). The old payload's block is
    // freed behind the copy: device memory on the compute stream, which waits for the copy; a
    // host block is kept until the host has waited for the copy stream (the CPU could write it
    // again through a new owner).
    copy_bytes_on_copy_stream(moved.raw(), moved.device(), here->raw(), here->device(), moved.nbytes());
    if (moved.device().is_cpu()) host_copies_pending_ = true;
    else retired_.push_back(*here);
  } else {
    moved.copy_from(*here);
  }
  *here = moved;
  (to == MemoryTier::device ? stats_.bytes_to_device : stats_.bytes_to_host) += std::int64_t(moved.nbytes());
  stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void DynamicMemory::begin_iteration(int keeper) {
  Keeper& k = keepers_.at(std::size_t(keeper));
  TIDAL_ASSERT(!k.in_iteration, "an iteration began inside another");
  k.in_iteration = true;
  if (in_iteration_) return;  // another keeper began it
  in_iteration_ = true;
  moment_ = -1;
}

void DynamicMemory::end_iteration(int keeper) {
  TIDAL_ASSERT(!in_moment_, "an iteration ended inside a moment");
  Keeper& k = keepers_.at(std::size_t(keeper));
  if (!k.in_iteration) return;  // a step without zero_grad: nothing traced
  k.in_iteration = false;
  if (std::any_of(keepers_.begin(), keepers_.end(), [](const Keeper& o) { return o.in_iteration; })) return;
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

bool DynamicMemory::on_device(const Tensor& param) const {
  return param.defined() && param.allocator() == &device_chunks_;
}

std::int64_t DynamicMemory::param_bytes_on_device() const {
  std::int64_t bytes = 0;
  for (const Keeper& k : keepers_)
    if (k.lists)
      for (const Tensor& t : k.lists->at(ChunkKind::param))
        if (on_device(t)) bytes += std::int64_t(t.nbytes());
  return bytes;
}

std::vector<int> DynamicMemory::evictable(const std::vector<int>& keep) const {
  std::vector<int> out;
  std::optional<std::int64_t> room;  // the host's, once a remote chunk could go (most runs have none)
  for (const Keeper& k : keepers_) {
    if (!k.lists) continue;
    const std::vector<Tensor>& params = k.lists->at(ChunkKind::param);
    for (int c = 0; c < k.chunks; ++c) {
      const int g = k.first + c;
      const Tensor& p = params[std::size_t(c)];
      if (!on_device(p) || pinned_.count(g) || std::binary_search(keep.begin(), keep.end(), g) || k.busy(c)) continue;
      if (k.remote(c)) {
        if (!room) room = host_room_for_remote();
        if (std::int64_t(p.nbytes()) > *room) continue;
      }
      out.push_back(g);
    }
  }
  return out;
}

std::int64_t DynamicMemory::host_room_for_remote() const {
  // The start-up check (ChunkManager::place_tiers) gave the host room for the rank's own lists
  // only: a remote chunk sent there may not take what an owned one needs when it is evicted.
  constexpr std::size_t unlimited = std::numeric_limits<std::int64_t>::max();
  if (host_.capacity() >= unlimited) return std::numeric_limits<std::int64_t>::max();
  std::int64_t room = std::int64_t(host_.capacity()) - std::int64_t(host_.current_bytes());
  for (const Keeper& k : keepers_)
    if (k.lists) {
      room -= k.host_staging;
      for (int c = 0; c < k.chunks; ++c)
        if (const Tensor& p = k.lists->at(ChunkKind::param)[std::size_t(c)]; on_device(p) && !k.remote(c))
          room -= std::int64_t(p.nbytes());
    }
  return room;
}

void DynamicMemory::reclaim(std::size_t over) {
  // The tier is about to pass L: chunks no operator computes with now go to the host, chosen as
  // to_device chooses, while there are any.
  std::int64_t freed = 0;
  while (freed < std::int64_t(over)) {
    const std::vector<int> candidates = evictable({});
    if (candidates.empty()) break;
    const int out = victim(candidates);
    freed += std::int64_t(payload(ChunkKind::param, out)->nbytes());
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

void DynamicMemory::to_device(int keeper, const std::vector<int>& chunks) {
  std::vector<int> global = chunks;
  for (int& c : global) c += keepers_.at(std::size_t(keeper)).first;
  to_device(std::move(global));
}

void DynamicMemory::to_device(std::vector<int> chunks) {
  std::sort(chunks.begin(), chunks.end());
  chunks.erase(std::unique(chunks.begin(), chunks.end()), chunks.end());
  if (last_use_.size() < std::size_t(chunks_)) last_use_.resize(std::size_t(chunks_), 0);
  std::int64_t need = 0;
  for (int c : chunks) {
    last_use_[std::size_t(c)] = tick_;
    if (in_iteration_ && !tracer_.finished()) tracer_.record_use(c);
    if (in_moment_) pinned_.insert(c);
    if (where(ChunkKind::param, c) != MemoryTier::device) need += std::int64_t(payload(ChunkKind::param, c)->nbytes());
  }
  if (options_.partition == Partition::dynamic) {
    // sec. 7.3: C + O must fit A, the room the coming interval's non-model data leaves; HOLD-like
    // chunks this operator does not use go to the host until it does.
    const std::int64_t budget = chunk_budget();
    std::int64_t held = param_bytes_on_device();
    while (held + need > budget) {
      const std::vector<int> candidates = evictable(chunks);
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
      held -= std::int64_t(payload(ChunkKind::param, out)->nbytes());
    }
  }
  for (int c : chunks) move(ChunkKind::param, c, MemoryTier::device);
  if (in_iteration_ && !tracer_.finished() && moment_ >= 0) {  // the operator's chunks (end_warmup)
    std::int64_t bytes = 0;
    for (int c : pinned_) bytes += std::int64_t(payload(ChunkKind::param, c)->nbytes());
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

void DynamicMemory::to_optimizer_side(int keeper, int chunk) {
  if (where(keeper, ChunkKind::master, chunk) == MemoryTier::device) {
    to_device(keeper, {chunk});
  } else {
    move(ChunkKind::param, keepers_.at(std::size_t(keeper)).first + chunk, MemoryTier::host);
    stage_states(keeper, chunk, true);  // from disk, Adam's update going back
  }
  wait_for_host_copies();  // Adam on the host reads it next
}

void DynamicMemory::after_step(int keeper) {
  unstage_states(keeper);
  if (options_.partition != Partition::fixed) return;
  const Keeper& k = keepers_.at(std::size_t(keeper));
  for (int c = 0; c < k.chunks; ++c)
    if (payload(ChunkKind::param, k.first + c)->defined()) to_device({k.first + c});
}

void DynamicMemory::place_optimizer_states() {
  // sec. 7.2: the margin is what the param lists and the peak non-model data leave; the keepers'
  // states fill it in their order (the first joined, the model's, first).
  std::int64_t param_bytes = 0;
  for (int c = 0; c < chunks_; ++c)
    if (const Tensor* t = payload(ChunkKind::param, c); t && t->defined()) param_bytes += std::int64_t(t->nbytes());
  std::int64_t margin = limit() - tracer_.peak_non_model() - param_bytes;
  for (int c = 0; c < chunks_; ++c) {
    std::int64_t trio = 0;
    for (ChunkKind k : kOptimizerKinds)
      if (const Tensor* t = payload(k, c); t && t->defined()) trio += std::int64_t(t->nbytes());
    if (trio == 0 || on_disk(ChunkKind::master, c)) continue;  // not this rank's, or decided at start
    if (trio > margin) break;
    for (ChunkKind k : kOptimizerKinds) move(k, c, MemoryTier::device);
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
  if (!has_disk()) return out;
  const MoveStats now = stats();
  std::int64_t file_bytes = 0;
  std::size_t chunks = 0;
  for (const Keeper& k : keepers_)
    if (k.disk) {
      file_bytes += k.disk->store().file_bytes();
      chunks += k.disk->chunks().size();
    }
  out["disk"] = {{"file_bytes", file_bytes},
                 {"chunks", chunks},
                 {"bytes_to_disk", now.bytes_to_disk},
                 {"bytes_from_disk", now.bytes_from_disk},
                 {"disk_seconds", now.disk_seconds}};
  return out;
}

}  // namespace tidal::memory
