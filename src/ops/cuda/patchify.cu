// ViT patch extraction on the GPU: one thread per patch feature, writes coalesced along the
// features; a pure copy, so the result is bitwise the CPU backend's.
#include "ops/patchify.h"

#include "ops/cuda/common.cuh"

namespace tidal::ops::cuda {
namespace {

constexpr int kThreads = 256;

// ---- kernels ----

// patches [B, gh*gw, Ch*P*P] from images [B, Ch, H, W]; feature f = (c * P + py) * P + px.
template <class T>
__global__ void patchify_kernel(T* __restrict__ patches, const T* __restrict__ images, std::int64_t Ch,
                                std::int64_t H, std::int64_t W, std::int64_t P, std::int64_t gw, std::int64_t npatch,
                                std::int64_t total) {
  const std::int64_t F = Ch * P * P;
  TIDAL_CUDA_FOR(i, total) {
    const std::int64_t f = i % F, row = i / F;  // row = b * npatch + n
    const std::int64_t n = row % npatch, b = row / npatch;
    const std::int64_t px = f % P, py = (f / P) % P, c = f / (P * P);
    const std::int64_t y = (n / gw) * P + py, x = (n % gw) * P + px;
    patches[i] = images[((b * Ch + c) * H + y) * W + x];
  }
}

}  // namespace

// ---- launchers ----

void patchify(Tensor& patches, const Tensor& images, std::int64_t P) {
  expect_cuda_contiguous(patches, "patchify patches");
  expect_cuda_contiguous(images, "patchify images");
  TIDAL_ASSERT(images.ndim() == 4 && images.dtype() == patches.dtype(), "patchify images {}", images.str());
  const std::int64_t B = images.dim(0), Ch = images.dim(1), H = images.dim(2), W = images.dim(3);
  TIDAL_CHECK(P > 0, "model.patch_size must be positive, got {}", P);
  TIDAL_CHECK(H % P == 0 && W % P == 0, "image size {}x{} is not a multiple of model.patch_size {}", H, W, P);
  const std::int64_t gh = H / P, gw = W / P, F = Ch * P * P;
  TIDAL_ASSERT(patches.shape() == Shape({B, gh * gw, F}), "patchify patches {}", patches.str());
  const std::int64_t total = patches.numel();
  if (total == 0) return;
  with_float_type(images.dtype(), [&]<class T>() {
    patchify_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, compute_stream()>>>(
        ptr<T>(patches), ptr<T>(images), Ch, H, W, P, gw, gh * gw, total);
  });
  TIDAL_CUDA_CHECK_LAUNCH("patchify_kernel");
}

}  // namespace tidal::ops::cuda
