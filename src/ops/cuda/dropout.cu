// Dropout on the GPU with the CPU backend's mask, bit for bit: the same Philox key (seed ^ layer)
// and counter (group of four global indices, step, micro-batch), one Philox call per group, and
// the same fp32 multiply by 1 / (1 - p) computed once on the host. So a run may move between
// backends, and shards on different devices draw their slices of one mask.
#include "ops/dropout.h"

#include "core/philox.h"
#include "ops/cuda/common.cuh"

namespace tidal::ops::cuda {
namespace {

constexpr int kThreads = 256;

// ---- kernels ----

// One thread per Philox group g in [g_begin, g_begin + groups): its four lanes are the global
// indices 4g .. 4g+3, local index i = 4g + lane - first, of which those in [0, n) are written.
// No __restrict__: out may alias in (in-place dropout); each element is read and written by one
// thread.
template <class T>
__global__ void dropout_kernel(T* out, const T* in, std::int64_t n, std::int64_t first, std::int64_t g_begin,
                               std::int64_t groups, std::uint32_t key0, std::uint32_t key1, std::uint32_t step,
                               std::uint32_t micro_batch, float p, float keep_scale) {
  TIDAL_CUDA_FOR(j, groups) {
    const std::int64_t g = g_begin + j;
    const PhiloxCounter r =
        philox4x32({std::uint32_t(g), std::uint32_t(std::uint64_t(g) >> 32), step, micro_batch}, {key0, key1});
    for (int lane = 0; lane < 4; ++lane) {
      const std::int64_t i = g * 4 + lane - first;
      if (i >= 0 && i < n) {
        const bool keep = uniform01(r[std::size_t(lane)]) >= p;
        out[i] = store<T>(keep ? load(in[i]) * keep_scale : 0.0f);
      }
    }
  }
}

}  // namespace

// ---- launchers ----

namespace {

void apply(Tensor& out, const Tensor& in, float p, const DropoutKey& key, const char* what) {
  expect_cuda_contiguous(out, what);
  expect_cuda_contiguous(in, what);
  expect_same(out, in, what);
  TIDAL_CHECK(p >= 0.0f && p < 1.0f, "dropout probability must be in [0, 1), got {}", p);
  const std::int64_t n = in.numel();
  if (n == 0) return;
  const float keep_scale = 1.0f / (1.0f - p);
  // The CPU backend's key and group range (ops/cpu/dropout.cpp), expression for expression.
  const std::uint32_t key0 = std::uint32_t(key.layer) ^ std::uint32_t(key.seed);
  const std::uint32_t key1 = std::uint32_t(key.layer >> 32) ^ std::uint32_t(key.seed >> 32);
  const std::int64_t first = key.first_element;
  const std::int64_t g_begin = first / 4, g_end = (first + n + 3) / 4;
  const std::int64_t groups = g_end - g_begin;
  with_float_type(in.dtype(), [&]<class T>() {
    dropout_kernel<T><<<blocks_for(groups, kThreads), kThreads, 0, compute_stream()>>>(
        ptr<T>(out), ptr<T>(in), n, first, g_begin, groups, key0, key1, key.step, key.micro_batch, p, keep_scale);
  });
  TIDAL_CUDA_CHECK_LAUNCH("dropout_kernel");
}

}  // namespace

void dropout_forward(Tensor& y, const Tensor& x, float p, const DropoutKey& key) { apply(y, x, p, key, "dropout"); }

void dropout_backward(Tensor& dx, const Tensor& dy, float p, const DropoutKey& key) {
  apply(dx, dy, p, key, "dropout backward");
}

}  // namespace tidal::ops::cuda
