// Helpers shared by the CUDA kernels (the GPU twin of ops/cpu/typed.h): the device type of each
// storage dtype, fp32 loads and round-to-nearest-even stores (the CPU backend's rounding, so the
// two backends store the same bits for the same fp32 value), dtype dispatch, block reductions,
// and argument checks. Every launcher runs on the compute stream.
#pragma once

#include "core/cuda/runtime.h"
#include "core/gpu.h"
#include "core/tensor.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <optional>

namespace tidal::ops::cuda {

using tidal::cuda::blocks_for;
using tidal::cuda::compute_stream;

__device__ __forceinline__ float load(float v) { return v; }
__device__ __forceinline__ float load(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float load(__half v) { return __half2float(v); }

template <class T>
__device__ __forceinline__ T store(float v);
template <>
__device__ __forceinline__ float store<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 store<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half store<__half>(float v) { return __float2half_rn(v); }

// f.template operator()<T>() with T = float, __nv_bfloat16 or __half by `dtype`.
template <class F>
void with_float_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: f.template operator()<float>(); return;
    case DType::bf16: f.template operator()<__nv_bfloat16>(); return;
    case DType::f16: f.template operator()<__half>(); return;
    case DType::i32:
    case DType::u8: break;
  }
  TIDAL_ASSERT(false, "floating-point op called on {}", dtype_name(dtype));
}

// The tensor's data as the device type T (the dtype was checked by the dispatch above).
template <class T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.raw());
}

inline void expect_cuda_contiguous(const Tensor& t, const char* what) {
  TIDAL_ASSERT(t.defined() && t.device().is_cuda() && t.is_contiguous(), "{} must be a contiguous GPU tensor, got {}{}",
               what, t.defined() ? t.str() : "undefined", t.defined() ? " on " + t.device().str() : "");
}

inline void expect_cuda_contiguous(std::initializer_list<const Tensor*> ts, const char* what) {
  for (const Tensor* t : ts) expect_cuda_contiguous(*t, what);
}

inline void expect_same(const Tensor& a, const Tensor& b, const char* what) {
  TIDAL_ASSERT(a.shape() == b.shape() && a.dtype() == b.dtype(), "{}: {} vs {}", what, a.str(), b.str());
}

// Rows and width of a tensor seen as [N, C] with C the last dimension.
inline std::int64_t rows_of(const Tensor& t) { return t.ndim() == 0 ? 1 : t.numel() / t.dim(-1); }

// Grid-stride loop over [0, n).
#define TIDAL_CUDA_FOR(i, n)                                                                       \
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < (n);              \
       i += std::int64_t(gridDim.x) * blockDim.x)

// ---- vectorised element access ----
// V elements of T moved as one access (16 bytes at most): kernels over bf16 / fp16 data move 8
// elements a load, which is what reaches the GPU's memory bandwidth (2-byte loads do not).
template <int V, class T>
struct alignas(V * sizeof(T)) Pack {
  T v[V];
};

template <int V, class T>
__device__ __forceinline__ Pack<V, T> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<V, T>*>(p);
}

template <int V, class T>
__device__ __forceinline__ void store_pack(T* p, const Pack<V, T>& x) {
  *reinterpret_cast<Pack<V, T>*>(p) = x;
}

// The widest pack (elements) of 16 bytes at most for every one of the types.
template <class... T>
inline constexpr int kPackOf = 16 / int(std::max({sizeof(T)...}));

// Whether p is aligned for packs of V elements of T.
template <int V, class T>
bool pack_aligned(const T* p) {
  return reinterpret_cast<std::uintptr_t>(p) % (V * sizeof(T)) == 0;
}

// Whether rows `width` elements wide, starting at each of the pointers, can be read V elements an
// access: the width a multiple of V and every pointer aligned for it.
template <int V, class... T>
bool rows_in_packs(std::int64_t width, const T*... rows) {
  return width % V == 0 && (pack_aligned<V>(rows) && ...);
}

// y[i] = f(in[i]...) for i in [0, n): f takes and returns fp32 (the operands loaded by load(), the
// result rounded once by store<T>()), V elements a thread per access and the last n % V one by
// one. y may alias an input: each element is read, then written, by one thread.
template <int V, class T, class F, class... In>
__global__ void map_kernel(T* y, std::int64_t n, F f, const In*... in) {
  const std::int64_t packs = n / V;
  TIDAL_CUDA_FOR(p, packs) {
    const std::int64_t i = p * V;
    Pack<V, T> out;
    [&](const Pack<V, In>&... x) {
#pragma unroll
      for (int e = 0; e < V; ++e) out.v[e] = store<T>(f(load(x.v[e])...));
    }(load_pack<V>(in + i)...);
    store_pack<V>(y + i, out);
  }
  const std::int64_t i = packs * V + blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = store<T>(f(load(in[i])...));
}

// Launches map_kernel on the compute stream: in packs where every pointer allows it, else one
// element per access.
template <class T, class F, class... In>
void map_elements(T* y, std::int64_t n, F f, const In*... in) {
  constexpr int kThreads = 256;
  constexpr int V = kPackOf<T, In...>;
  if (n == 0) return;
  if (pack_aligned<V>(y) && (pack_aligned<V>(in) && ...))
    map_kernel<V><<<blocks_for(n / V + 1, kThreads), kThreads, 0, compute_stream()>>>(y, n, f, in...);
  else
    map_kernel<1><<<blocks_for(n, kThreads), kThreads, 0, compute_stream()>>>(y, n, f, in...);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024), returned to every thread.
// `scratch` holds 32 floats of shared memory; the call synchronises the block.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

// ---- a bad index found on the device ----
// Inputs a kernel must refuse (a target or token id outside its range) are the user's error, which
// the CPU backend names. A kernel records the first offending position in this device word
// (integer atomicMin: the same answer whatever the timing); the launcher reads it back (one small
// synchronisation) and throws the CPU's message.
class FirstBad {
 public:
  explicit FirstBad(cudaStream_t stream) : word_(Tensor::empty({2}, DType::i32, gpu_allocator())) {
    TIDAL_CUDA_CALL(cudaMemsetAsync(word_.raw(), 0xff, sizeof(unsigned long long), stream));
  }
  unsigned long long* device() { return static_cast<unsigned long long*>(word_.raw()); }
  // The first offending position, if any (waits for the kernels before it).
  std::optional<std::int64_t> position() const {
    unsigned long long bad = kNone;
    copy_bytes(&bad, Device::cpu(), word_.raw(), word_.device(), sizeof(bad));
    return bad == kNone ? std::nullopt : std::optional<std::int64_t>(std::int64_t(bad));
  }
  // The i32 value at `position` of a GPU tensor (the offending target or id, for the message).
  static std::int32_t value_at(const Tensor& t, std::int64_t position) {
    std::int32_t v = 0;
    copy_bytes(&v, Device::cpu(), static_cast<const std::int32_t*>(t.raw()) + position, t.device(), sizeof(v));
    return v;
  }

 private:
  static constexpr unsigned long long kNone = ~0ull;
  Tensor word_;
};

// ---- column sums in a fixed order ----
// A norm's weight gradients sum over the rows: each chunk of rows sums into its own partial row,
// then one thread per column adds the partials in chunk order. A chunk has at least 64 rows,
// there are at most 256 of them (the reduce adds them serially; gridDim.y stays legal) and their
// partials take at most 2^21 floats; the chunking depends on the shape only (never the device),
// so every bit of the sums is fixed by the shape.
struct RowChunks {
  std::int64_t count, rows;  // chunks, and rows in each (the last may have fewer)
};
inline RowChunks row_chunks(std::int64_t N, std::int64_t partial_floats_per_chunk) {
  constexpr std::int64_t kRowsPerChunk = 64, kMaxChunks = 256, kMaxPartialFloats = std::int64_t(1) << 21;
  const std::int64_t count = std::min({(N + kRowsPerChunk - 1) / kRowsPerChunk,
                                       std::max<std::int64_t>(1, kMaxPartialFloats / partial_floats_per_chunk),
                                       kMaxChunks});
  return {count, (N + count - 1) / count};
}

}  // namespace tidal::ops::cuda
