#include "core/cuda/allocators.h"

#include "core/cuda/runtime.h"

#include <cstdint>
#include <limits>

namespace tidal::cuda {
namespace {

int current_device() {
  int d = 0;
  TIDAL_CUDA_CALL(cudaGetDevice(&d));
  return d;
}

}  // namespace

bool device_has_memory_pools(int device) {
  int supported = 0;
  const cudaError_t s = cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device);
  if (s != cudaSuccess) cudaGetLastError();
  return s == cudaSuccess && supported != 0;
}

DeviceAllocator::DeviceAllocator()
    : Allocator(MemoryTier::device, Device::cuda(current_device()), std::numeric_limits<std::size_t>::max()),
      pooled_(device_has_memory_pools(device().index)) {
  if (!pooled_) return;
  cudaMemPool_t pool = nullptr;
  TIDAL_CUDA_CALL(cudaDeviceGetDefaultMemPool(&pool, device().index));
  std::uint64_t keep_everything = std::numeric_limits<std::uint64_t>::max();
  TIDAL_CUDA_CALL(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_everything));
}

void* DeviceAllocator::raw_allocate(std::size_t bytes) {
  void* p = nullptr;
  const cudaError_t s = pooled_ ? cudaMallocAsync(&p, bytes, compute_stream()) : cudaMalloc(&p, bytes);
  if (s == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky: clear it, and let Allocator::allocate report the tier's state
    return nullptr;
  }
  TIDAL_CUDA_CALL(s);
  return p;
}

// cudaFree waits for the whole device, so the plain path is ordered after every queued use.
void DeviceAllocator::raw_deallocate(void* ptr, std::size_t) {
  TIDAL_CUDA_CALL(pooled_ ? cudaFreeAsync(ptr, compute_stream()) : cudaFree(ptr));
}

PinnedHostAllocator::PinnedHostAllocator()
    : Allocator(MemoryTier::host_pinned, Device::cpu(), std::numeric_limits<std::size_t>::max()) {}

void* PinnedHostAllocator::raw_allocate(std::size_t bytes) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = free_.find(bytes); it != free_.end()) {
      void* p = it->second;
      free_.erase(it);
      return p;
    }
  }
  void* p = nullptr;
  const cudaError_t s = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
  if (s == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return nullptr;
  }
  TIDAL_CUDA_CALL(s);
  return p;
}

void PinnedHostAllocator::raw_deallocate(void* ptr, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  free_.emplace(bytes, ptr);
}

}  // namespace tidal::cuda
