#include "ops/patchify.h"

#include "ops/cpu/typed.h"

namespace tidal::ops::cpu {

void patchify(Tensor& patches, const Tensor& images, std::int64_t P) {
  expect_cpu_contiguous(patches, "patchify patches");
  expect_cpu_contiguous(images, "patchify images");
  TIDAL_ASSERT(images.ndim() == 4 && images.dtype() == patches.dtype(), "patchify images {}", images.str());
  const std::int64_t B = images.dim(0), Ch = images.dim(1), H = images.dim(2), W = images.dim(3);
  TIDAL_CHECK(H % P == 0 && W % P == 0, "image size {}x{} is not a multiple of model.patch_size {}", H, W, P);
  const std::int64_t gh = H / P, gw = W / P, F = Ch * P * P;
  TIDAL_ASSERT(patches.shape() == Shape({B, gh * gw, F}), "patchify patches {}", patches.str());
  with_float_type(images.dtype(), [&]<class T>() {
    const T* pi = images.data<T>();
    T* pp = patches.data<T>();
#pragma omp parallel for collapse(2) schedule(static)
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t n = 0; n < gh * gw; ++n) {
        const std::int64_t y0 = (n / gw) * P, x0 = (n % gw) * P;
        T* out = pp + (b * gh * gw + n) * F;
        for (std::int64_t c = 0; c < Ch; ++c)
          for (std::int64_t py = 0; py < P; ++py)
            for (std::int64_t px = 0; px < P; ++px)
              out[(c * P + py) * P + px] = pi[((b * Ch + c) * H + y0 + py) * W + x0 + px];
      }
  });
}

}  // namespace tidal::ops::cpu
