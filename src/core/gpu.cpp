#include "core/gpu.h"

#include "core/error.h"
#include "core/thread_share.h"

#include <omp.h>

#include <cstring>
#include <thread>

#if TIDAL_CUDA
#include "core/cuda/allocators.h"
#include "core/cuda/fill.h"
#include "core/cuda/runtime.h"
#endif

namespace tidal {

Allocator& allocator_on(Device device) { return device.is_cuda() ? gpu_allocator() : default_allocator(); }

namespace {

// Host copies and zeroing of 1 MiB and more are split over the threads, on the thread that
// drives the step (the process's first) outside parallel regions: one thread's stores reach a
// fraction of what the memory takes (measured on a 2-core Xeon VM, 92 MiB: memcpy 6.7 GB/s on one
// thread, 14.3 on two; memset 10.8 and 41). A background thread (the checkpoint writer's) copies
// on its own, beside the step's threads.
constexpr std::size_t kSplitBytes = std::size_t(1) << 20;
const std::thread::id g_first_thread = std::this_thread::get_id();  // set as the program loads

bool split(std::size_t bytes) {
  return bytes >= kSplitBytes && omp_get_max_threads() > 1 && !omp_in_parallel() &&
         std::this_thread::get_id() == g_first_thread;
}

// f(lo, hi) for each thread's share [lo, hi) of [0, bytes), shares cache lines apart.
template <class F>
void on_shares(std::size_t bytes, const F& f) {
#pragma omp parallel
  {
    const ThreadShare mine = thread_share(std::int64_t(bytes), 64);
    f(std::size_t(mine.lo), std::size_t(mine.hi));
  }
}

void host_copy_rows(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch, std::size_t row_bytes,
                    std::size_t rows) {
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  if (!split(row_bytes * rows)) {
    for (std::size_t r = 0; r < rows; ++r) std::memcpy(d + r * dst_pitch, s + r * src_pitch, row_bytes);
  } else if (rows == 1) {
    on_shares(row_bytes, [&](std::size_t lo, std::size_t hi) { std::memcpy(d + lo, s + lo, hi - lo); });
  } else {
#pragma omp parallel for schedule(static)
    for (std::size_t r = 0; r < rows; ++r) std::memcpy(d + r * dst_pitch, s + r * src_pitch, row_bytes);
  }
}

void host_zero(void* dst, std::size_t bytes) {
  char* d = static_cast<char*>(dst);
  if (!split(bytes)) std::memset(d, 0, bytes);
  else on_shares(bytes, [&](std::size_t lo, std::size_t hi) { std::memset(d + lo, 0, hi - lo); });
}

}  // namespace

#if TIDAL_CUDA

bool gpu_available() {
  static const bool available = [] {
    int n = 0;
    const cudaError_t s = cudaGetDeviceCount(&n);
    if (s != cudaSuccess) cudaGetLastError();  // no driver, or no device: not an error here
    return s == cudaSuccess && n > 0;
  }();
  return available;
}

std::string gpu_description() {
  int n = 0;
  const cudaError_t s = cudaGetDeviceCount(&n);
  if (s != cudaSuccess) {
    cudaGetLastError();
    return fmt::format("no GPU ({})", cudaGetErrorString(s));
  }
  if (n == 0) return "no GPU (no CUDA device visible)";
  int device = 0;
  TIDAL_CUDA_CALL(cudaGetDevice(&device));
  cudaDeviceProp p{};
  TIDAL_CUDA_CALL(cudaGetDeviceProperties(&p, device));
  return fmt::format("{} (sm_{}{}, {:.1f} GiB, memory from {})", p.name, p.major, p.minor,
                     double(p.totalGlobalMem) / (1 << 30),
                     cuda::device_has_memory_pools(device) ? "the stream-ordered pool" : "cudaMalloc (no memory pools)");
}

int gpu_count() {
  int n = 0;
  if (gpu_available()) TIDAL_CUDA_CALL(cudaGetDeviceCount(&n));
  return n;
}

int gpu_compute_capability() {
  if (!gpu_available()) return 0;
  int device = 0, major = 0, minor = 0;
  TIDAL_CUDA_CALL(cudaGetDevice(&device));
  TIDAL_CUDA_CALL(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  TIDAL_CUDA_CALL(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major * 10 + minor;
}

void use_gpu_of_local_rank(int local_rank) {
  if (gpu_available()) TIDAL_CUDA_CALL(cudaSetDevice(local_rank % gpu_count()));
}

Allocator& gpu_allocator() {
  TIDAL_CHECK(gpu_available(), "GPU memory was asked for, but this process sees {}", gpu_description());
  static auto* a = new cuda::DeviceAllocator();  // never destroyed: blocks may outlive static destructors
  return *a;
}

Allocator& pinned_host_allocator() {
  TIDAL_CHECK(gpu_available(), "pinned host memory was asked for, but this process sees {}", gpu_description());
  static auto* a = new cuda::PinnedHostAllocator();
  return *a;
}

namespace {
cudaMemcpyKind kind_of(Device dst, Device src) {
  if (dst.is_cuda()) return src.is_cuda() ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice;
  return src.is_cuda() ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost;
}
}  // namespace

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes) {
  copy_rows(dst, bytes, dst_device, src, bytes, src_device, bytes, 1);
}

void copy_rows(void* dst, std::size_t dst_pitch, Device dst_device, const void* src, std::size_t src_pitch,
               Device src_device, std::size_t row_bytes, std::size_t rows) {
  if (row_bytes == 0 || rows == 0 || dst_device.is_meta() || src_device.is_meta()) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    host_copy_rows(dst, dst_pitch, src, src_pitch, row_bytes, rows);
    return;
  }
  const cudaStream_t s = cuda::compute_stream();
  const cudaMemcpyKind kind = kind_of(dst_device, src_device);
  if (rows == 1 || (dst_pitch == row_bytes && src_pitch == row_bytes)) {
    // One block: a plain copy (a 2D copy's pitch may not exceed the device's maximum, about 2 GiB).
    TIDAL_CUDA_CALL(cudaMemcpyAsync(dst, src, row_bytes * rows, kind, s));
  } else {
    TIDAL_CUDA_CALL(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows, kind, s));
  }
  if (dst_device.is_cpu() || src_device.is_cpu()) TIDAL_CUDA_CALL(cudaStreamSynchronize(s));
}

void zero_bytes(void* dst, Device device, std::size_t bytes) {
  if (device.is_meta()) return;
  if (device.is_cpu()) {
    host_zero(dst, bytes);
    return;
  }
  TIDAL_CUDA_CALL(cudaMemsetAsync(dst, 0, bytes, cuda::compute_stream()));
}

void fill_f32(float* dst, Device device, std::int64_t n, float value) {
  if (device.is_meta()) return;
  if (device.is_cpu()) {
    for (std::int64_t i = 0; i < n; ++i) dst[i] = value;
    return;
  }
  cuda::fill_f32(dst, n, value);
}

void synchronize_gpu() {
  if (gpu_available()) cuda::synchronize();
}

std::size_t gpu_free_bytes() {
  std::size_t free = 0, total = 0;
  TIDAL_CUDA_CALL(cudaMemGetInfo(&free, &total));
  return free;
}

namespace {
// Recorded again for each copy: a wait captures the record current when it is queued.
cudaEvent_t make_event() {
  cudaEvent_t e = nullptr;
  TIDAL_CUDA_CALL(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}
}  // namespace

void copy_bytes_on_copy_stream(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes) {
  if (bytes == 0) return;
  static cudaEvent_t computed = make_event(), copied = make_event();
  const cudaStream_t compute = cuda::compute_stream(), copy = cuda::copy_stream();
  TIDAL_CUDA_CALL(cudaEventRecord(computed, compute));
  TIDAL_CUDA_CALL(cudaStreamWaitEvent(copy, computed, 0));
  TIDAL_CUDA_CALL(cudaMemcpyAsync(dst, src, bytes, kind_of(dst_device, src_device), copy));
  TIDAL_CUDA_CALL(cudaEventRecord(copied, copy));
  TIDAL_CUDA_CALL(cudaStreamWaitEvent(compute, copied, 0));
}

void wait_for_copies() { TIDAL_CUDA_CALL(cudaStreamSynchronize(cuda::copy_stream())); }

struct GpuFence::Event {
  Event() { TIDAL_CUDA_CALL(cudaEventCreateWithFlags(&event, cudaEventDisableTiming | cudaEventBlockingSync)); }
  ~Event() { cudaEventDestroy(event); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t event = nullptr;
};

bool GpuFence::passed() const {
  if (!event_) return true;
  const cudaError_t s = cudaEventQuery(event_->event);
  if (s == cudaErrorNotReady) return false;
  TIDAL_CUDA_CALL(s);
  return true;
}

void GpuFence::wait() const {
  if (event_) TIDAL_CUDA_CALL(cudaEventSynchronize(event_->event));
}

namespace {
GpuFence record_fence(cudaStream_t stream) {
  auto e = std::make_shared<GpuFence::Event>();
  TIDAL_CUDA_CALL(cudaEventRecord(e->event, stream));
  return GpuFence(std::move(e));
}
}  // namespace

GpuFence copy_to_host_behind_compute(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return {};
  const cudaStream_t staging = cuda::staging_stream();
  {
    const GpuFence::Event computed;  // released once the wait is queued
    TIDAL_CUDA_CALL(cudaEventRecord(computed.event, cuda::compute_stream()));
    TIDAL_CUDA_CALL(cudaStreamWaitEvent(staging, computed.event, 0));
  }
  TIDAL_CUDA_CALL(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, staging));
  return record_fence(staging);
}

GpuFence copy_to_device_on_compute(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return {};
  const cudaStream_t compute = cuda::compute_stream();
  TIDAL_CUDA_CALL(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, compute));
  return record_fence(compute);
}

#else  // no CUDA in this build

namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw Error(fmt::format("{} needs the CUDA backend, and this build has none: rebuild with nvcc installed "
                          "(cmake -DTIDAL_CUDA=ON)",
                          what));
}
}  // namespace

bool gpu_available() { return false; }
int gpu_count() { return 0; }
void use_gpu_of_local_rank(int) {}
std::string gpu_description() { return "no GPU (this build has no CUDA backend)"; }
int gpu_compute_capability() { return 0; }
Allocator& gpu_allocator() { no_cuda("GPU memory"); }
Allocator& pinned_host_allocator() { no_cuda("pinned host memory"); }

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes) {
  copy_rows(dst, bytes, dst_device, src, bytes, src_device, bytes, 1);
}

void copy_rows(void* dst, std::size_t dst_pitch, Device dst_device, const void* src, std::size_t src_pitch,
               Device src_device, std::size_t row_bytes, std::size_t rows) {
  if (dst_device.is_meta() || src_device.is_meta()) return;
  if (dst_device.is_cuda() || src_device.is_cuda()) no_cuda("a copy to or from a GPU tensor");
  host_copy_rows(dst, dst_pitch, src, src_pitch, row_bytes, rows);
}

void zero_bytes(void* dst, Device device, std::size_t bytes) {
  if (device.is_meta()) return;
  if (device.is_cuda()) no_cuda("zeroing a GPU tensor");
  host_zero(dst, bytes);
}

void fill_f32(float* dst, Device device, std::int64_t n, float value) {
  if (device.is_meta()) return;
  if (device.is_cuda()) no_cuda("filling a GPU tensor");
  for (std::int64_t i = 0; i < n; ++i) dst[i] = value;
}

void synchronize_gpu() {}
std::size_t gpu_free_bytes() { no_cuda("asking for free GPU memory"); }

void copy_bytes_on_copy_stream(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes) {
  copy_bytes(dst, dst_device, src, src_device, bytes);
}

void wait_for_copies() {}

struct GpuFence::Event {};
bool GpuFence::passed() const { return true; }
void GpuFence::wait() const {}
GpuFence copy_to_host_behind_compute(void*, const void*, std::size_t) { no_cuda("a staged copy out of a GPU tensor"); }
GpuFence copy_to_device_on_compute(void*, const void*, std::size_t) { no_cuda("a staged copy into a GPU tensor"); }

#endif

}  // namespace tidal
