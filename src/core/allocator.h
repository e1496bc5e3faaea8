// Allocators, one per memory tier, each counting current and peak bytes. The memory manager
// and the metrics read these counters; a capacity turns a tier into a budget (on a machine
// without a GPU the "device" tier is host memory with a cap, so chunk placement runs anywhere).
#pragma once

#include "core/device.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
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

// The process's host tier: the default home of tensors that nobody placed elsewhere.
Allocator& host_allocator();

}  // namespace tidal
