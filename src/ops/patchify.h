// ViT patch extraction: images [B, Ch, H, W] -> patches [B, N, Ch*P*P], N = (H/P)(W/P) in
// row-major grid order, features ordered (channel, row in patch, column in patch): a Linear on
// the patches equals a stride-P convolution with weight [D, Ch, P, P].
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace tidal::ops {

namespace cpu {
void patchify(Tensor& patches, const Tensor& images, std::int64_t patch);
}
namespace meta {  // ops/meta/: what the op costs, on meta tensors
void patchify(Tensor& patches, const Tensor& images, std::int64_t patch);
}  // namespace meta
#if TIDAL_CUDA
namespace cuda {
void patchify(Tensor& patches, const Tensor& images, std::int64_t patch);
}
#endif

inline void patchify(Tensor& patches, const Tensor& images, std::int64_t patch) {
  TIDAL_OPS_DISPATCH(images, patchify, patches, images, patch);
}

}  // namespace tidal::ops
