// The GPU as the rest of tidal sees it, in every build: whether one is usable, its memory tiers,
// and byte moves between host and device. A build without CUDA answers "no GPU", and asking it
// for GPU memory is an error that names the rebuild.
//
// Ordering: every move here is queued on the compute stream (core/cuda/runtime.h), after the ops
// queued before it, and is complete on return whenever either side is host memory - so a host
// reader never sees a half-written tensor. Moves that should overlap compute (chunk traffic)
// use the copy stream through core/cuda/ directly.
#pragma once

#include "core/allocator.h"
#include "core/device.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace tidal {

// Built with CUDA and at least one device visible to this process.
bool gpu_available();
// "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)", or why there is none.
std::string gpu_description();
// GPUs visible to this process (0 without CUDA).
int gpu_count();
// The current GPU's compute capability as major * 10 + minor (90: Hopper); 0 without a GPU.
int gpu_compute_capability();
// The GPU of the `local_rank`-th process on a node: the node's GPUs in turn (so ranks beyond their
// count share them). Before any GPU work; nothing without a GPU.
void use_gpu_of_local_rank(int local_rank);

// The GPU's memory (a stream-ordered pool that keeps freed blocks for reuse), counted like every
// tier; and page-locked host memory, which the GPU can copy to and from asynchronously.
Allocator& gpu_allocator();
Allocator& pinned_host_allocator();
// Scratch memory on `device`: the GPU's allocator, or the host's default one.
Allocator& allocator_on(Device device);

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes);
// `rows` runs of `row_bytes`, the i-th from src + i * src_pitch to dst + i * dst_pitch.
void copy_rows(void* dst, std::size_t dst_pitch, Device dst_device, const void* src, std::size_t src_pitch,
               Device src_device, std::size_t row_bytes, std::size_t rows);
void zero_bytes(void* dst, Device device, std::size_t bytes);
void fill_f32(float* dst, Device device, std::int64_t n, float value);
// Blocks until the GPU has run everything queued on the compute stream (no-op without a GPU).
void synchronize_gpu();
// Bytes of GPU memory free on the current device now.
std::size_t gpu_free_bytes();

// Chunk traffic between host and GPU, on the copy stream: the copy first waits for the work
// queued on the compute stream (the chunk's last writer), and work queued on the compute stream
// afterwards waits for the copy. The host does not block: a host destination may be read only
// after wait_for_copies(). Host memory on either side should be pinned (pinned_host_allocator),
// or the driver stages the copy synchronously.
void copy_bytes_on_copy_stream(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes);
void wait_for_copies();

// A point in the GPU's queued work that the host can wait for (a CUDA event); a default-made one
// has passed. Copies share it; any thread may wait.
class GpuFence {
 public:
  struct Event;  // the CUDA event, in builds with CUDA
  GpuFence() = default;
  explicit GpuFence(std::shared_ptr<Event> event) : event_(std::move(event)) {}
  bool passed() const;
  // Blocks until the GPU has passed it, yielding the core meanwhile (ranks sharing a node's cores).
  void wait() const;

 private:
  std::shared_ptr<Event> event_;
};

// The staged collectives' copies (comm/staged_communicator.h). Out: GPU memory to pinned host
// memory on the staging stream, after the work queued on the compute stream so far, which goes on
// without waiting: src must stay allocated and unwritten, and dst unread, until the fence passes.
GpuFence copy_to_host_behind_compute(void* dst, const void* src, std::size_t bytes);
// Back: pinned host memory into GPU memory, queued on the compute stream (later ops see the
// values); the host returns at once, and src must stay until the fence passes.
GpuFence copy_to_device_on_compute(void* dst, const void* src, std::size_t bytes);

}  // namespace tidal
