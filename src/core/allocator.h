// Allocators, one per memory tier, each counting current and peak bytes. The memory manager
// and the metrics read these counters; a capacity turns a tier into a budget (on a machine
// without a GPU the "device" tier is host memory with a cap, so chunk placement runs anywhere).
#pragma once

#include "core/device.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string_view>

namespace tidal {

enum class MemoryTier { device, host_pinned, host, disk };
std::string_view tier_name(MemoryTier t);

class Allocator {
 public:
  Allocator(MemoryTier tier, Device device, std::size_t capacity)
      : tier_(tier), device_(device), capacity_(capacity) {}
  virtual ~Allocator() = default;
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // Throws OutOfMemory, naming the tier, the request and what is free, when over capacity.
  void* allocate(std::size_t bytes);
  void deallocate(void* ptr, std::size_t bytes);

  MemoryTier tier() const { return tier_; }
  Device device() const { return device_; }
  std::size_t capacity() const { return capacity_; }
  void set_capacity(std::size_t bytes) { capacity_ = bytes; }
  // Called when an allocation would pass the capacity by `over` bytes, before it fails: it may
  // free memory of this tier (the dynamic memory sending chunks to the host) or raise the
  // capacity, and the allocation is checked again. Not called from within itself.
  using Reclaimer = std::function<void(std::size_t over)>;
  void set_reclaimer(Reclaimer reclaimer) { reclaimer_ = std::move(reclaimer); }
  std::size_t current_bytes() const { return current_.load(std::memory_order_relaxed); }
  std::size_t peak_bytes() const { return peak_.load(std::memory_order_relaxed); }
  void reset_peak() { peak_.store(current_bytes(), std::memory_order_relaxed); }

 protected:
  virtual void* raw_allocate(std::size_t bytes) = 0;
  virtual void raw_deallocate(void* ptr, std::size_t bytes) = 0;

 private:
  MemoryTier tier_;
  Device device_;
  std::size_t capacity_;
  Reclaimer reclaimer_;
  bool reclaiming_ = false;
  std::atomic<std::size_t> current_{0};
  std::atomic<std::size_t> peak_{0};
};

// Host memory, 64-byte aligned (a cache line, and wide enough for any SIMD load).
class HostAllocator final : public Allocator {
 public:
  explicit HostAllocator(MemoryTier tier = MemoryTier::host,
                         std::size_t capacity = std::numeric_limits<std::size_t>::max())
      : Allocator(tier, Device::cpu(), capacity) {}

 protected:
  void* raw_allocate(std::size_t bytes) override;
  void raw_deallocate(void* ptr, std::size_t bytes) override;
};

// Counts a share of another allocator: its bytes come from (and are charged to) `parent`, whose
// capacity binds both. The chunks' share of the device tier, or the non-model data's.
class SubAllocator final : public Allocator {
 public:
  explicit SubAllocator(Allocator& parent, std::size_t capacity = std::numeric_limits<std::size_t>::max())
      : Allocator(parent.tier(), parent.device(), capacity), parent_(parent) {}
  Allocator& parent() const { return parent_; }

 protected:
  void* raw_allocate(std::size_t bytes) override { return parent_.allocate(bytes); }
  void raw_deallocate(void* ptr, std::size_t bytes) override { parent_.deallocate(ptr, bytes); }

 private:
  Allocator& parent_;
};

// Meta memory (core/device.h): every allocation counted like a tier's and given an address of its
// own that is never read or written - tensors that are shapes and identities, for the planner to
// run the real modules on. `observe` hears each allocation's bytes (the planner times the tensors
// a step makes).
class MetaAllocator final : public Allocator {
 public:
  MetaAllocator() : Allocator(MemoryTier::device, Device::meta(), std::numeric_limits<std::size_t>::max()) {}
  std::function<void(std::size_t bytes)> observe;

 protected:
  void* raw_allocate(std::size_t bytes) override;
  void raw_deallocate(void*, std::size_t) override {}

 private:
  std::uintptr_t next_ = std::uintptr_t(1) << 40;  // far from anything mapped; advanced, never reused
};

// The process's meta memory, for what a planner's step keeps beside its activations (a loss's
// scalars that a run holds on the host).
Allocator& meta_allocator();
// The host memory beside tensors on `device`: the host tier, or meta memory beside meta tensors
// (a planned step's host side has no values either).
Allocator& host_memory_for(Device device);

// The process's host tier.
Allocator& host_allocator();
// The process's device tier: the computing device's memory (on a machine without a GPU, host
// memory that a capacity - [memory] device_limit - turns into a budget).
Allocator& device_allocator();

// Where tensors go that nobody placed elsewhere: the host tier, unless a ScopedDefaultAllocator
// on this thread says otherwise (the trainer under heterogeneous memory: activations then count
// in the device tier, beside the chunks, as on a GPU).
Allocator& default_allocator();
class ScopedDefaultAllocator {
 public:
  explicit ScopedDefaultAllocator(Allocator& a);
  ~ScopedDefaultAllocator();
  ScopedDefaultAllocator(const ScopedDefaultAllocator&) = delete;
  ScopedDefaultAllocator& operator=(const ScopedDefaultAllocator&) = delete;

 private:
  Allocator* previous_;
};

}  // namespace tidal
