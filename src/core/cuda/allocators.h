// The GPU's memory tiers. DeviceAllocator draws from the device's stream-ordered memory pool on
// the compute stream (cudaMallocAsync / cudaFreeAsync): the pool keeps freed blocks (its release
// threshold is raised to "never"), so steady-state allocation costs no cudaMalloc, and a block
// freed on the compute stream is reused only by work queued after the free. On a device without
// memory pools (some virtualised GPUs) it falls back to plain cudaMalloc / cudaFree. Memory touched by the
// copy stream must be ordered back onto the compute stream (an event) before it is freed.
// PinnedHostAllocator hands out page-locked host memory, keeping freed blocks by size (chunks
// all have one size, so reuse is exact). Both count current and peak bytes like every tier.
#pragma once

#include "core/allocator.h"

#include <cstddef>
#include <map>
#include <mutex>

namespace tidal::cuda {

bool device_has_memory_pools(int device);

class DeviceAllocator final : public Allocator {
 public:
  DeviceAllocator();

 protected:
  void* raw_allocate(std::size_t bytes) override;
  void raw_deallocate(void* ptr, std::size_t bytes) override;

 private:
  bool pooled_;  // the stream-ordered pool, or plain cudaMalloc where the device has none
};

class PinnedHostAllocator final : public Allocator {
 public:
  PinnedHostAllocator();

 protected:
  void* raw_allocate(std::size_t bytes) override;
  void raw_deallocate(void* ptr, std::size_t bytes) override;

 private:
  std::mutex mutex_;
  std::multimap<std::size_t, void*> free_;  // bytes -> block
};

}  // namespace tidal::cuda
