#include "core/allocator.h"

#include "core/error.h"

#include <malloc.h>

#include <cstdlib>
#include <utility>

namespace tidal {

std::string_view tier_name(MemoryTier t) {
  switch (t) {
    case MemoryTier::device: return "device";
    case MemoryTier::host_pinned: return "host_pinned";
    case MemoryTier::host: return "host";
    case MemoryTier::disk: return "disk";
  }
  TIDAL_ASSERT(false, "unknown tier {}", int(t));
}

void* Allocator::allocate(std::size_t bytes) {
  if (reclaimer_ && !reclaiming_ && current_bytes() + bytes > capacity_) {
    reclaiming_ = true;
    try {
      reclaimer_(current_bytes() + bytes - capacity_);
    } catch (...) {
      reclaiming_ = false;
      throw;
    }
    reclaiming_ = false;
  }
  std::size_t now = current_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  if (now > capacity_) {
    current_.fetch_sub(bytes, std::memory_order_relaxed);
    throw OutOfMemory(fmt::format("out of {} memory: asked for {} bytes with {} of {} in use; raise the tier's "
                                  "capacity ({}) or make the model or batch smaller",
                                  tier_name(tier_), bytes, now - bytes, capacity_,
                                  tier_ == MemoryTier::device ? "memory.device_limit" : "memory.host_limit"),
                      now);
  }
  std::size_t peak = peak_.load(std::memory_order_relaxed);
  while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  if (bytes == 0) return nullptr;
  void* p = raw_allocate(bytes);
  if (p == nullptr) {
    current_.fetch_sub(bytes, std::memory_order_relaxed);
    throw OutOfMemory(fmt::format("the system refused {} bytes of {} memory", bytes, tier_name(tier_)));
  }
  return p;
}

void Allocator::deallocate(void* ptr, std::size_t bytes) {
  if (ptr != nullptr) raw_deallocate(ptr, bytes);
  current_.fetch_sub(bytes, std::memory_order_relaxed);
}

namespace {

// glibc gives blocks of 32 MiB and more back to the system when they are freed (they are mmap'd)
// and trims the free top of its heap. A training step frees and asks again for the same
// activation, logit and gradient blocks every step, so each step would fault in fresh zeroed
// pages for all of them. Kept instead (no mmap'd blocks, no trimming), the process's footprint
// stays at its high-water mark, as a caching allocator's does. Measured on the reference GPT of
// bench/cpu_train_vs_torch.py (fp32, 2 threads, 12-step runs, two sets of 5-6 paired runs): wall
// time 0.94x and 0.97x (medians), sys time 0.52 s against 0.77 s, peak resident memory 7% more.
// The setting is the process's: it holds for every malloc.
void keep_freed_host_memory() {
  static const bool kept = [] {
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, -1);  // -1: never trim
    return true;
  }();
  (void)kept;
}

}  // namespace

void* MetaAllocator::raw_allocate(std::size_t bytes) {
  if (observe) observe(bytes);
  void* p = reinterpret_cast<void*>(next_);
  next_ += (bytes + 63) / 64 * 64;
  return p;
}

Allocator& meta_allocator() {
  static auto* a = new MetaAllocator();
  return *a;
}

Allocator& host_memory_for(Device device) { return device.is_meta() ? meta_allocator() : host_allocator(); }

void* HostAllocator::raw_allocate(std::size_t bytes) {
  keep_freed_host_memory();
  constexpr std::size_t kAlign = 64;
  return std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
}

void HostAllocator::raw_deallocate(void* ptr, std::size_t) { std::free(ptr); }

Allocator& host_allocator() {
  static HostAllocator allocator(MemoryTier::host);
  return allocator;
}

Allocator& device_allocator() {
  static HostAllocator allocator(MemoryTier::device);
  return allocator;
}

namespace {
// The thread's: a step's scope covers the thread that runs it (the planner replays layouts on
// threads of its own, each in its own meta memory).
thread_local Allocator* default_allocator_ = nullptr;
}  // namespace

Allocator& default_allocator() { return default_allocator_ ? *default_allocator_ : host_allocator(); }

ScopedDefaultAllocator::ScopedDefaultAllocator(Allocator& a) : previous_(std::exchange(default_allocator_, &a)) {}

ScopedDefaultAllocator::~ScopedDefaultAllocator() { default_allocator_ = previous_; }

}  // namespace tidal
