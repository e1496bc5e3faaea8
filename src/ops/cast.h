// Casts between fp32, bf16 and fp16 (round to nearest even).
#pragma once

#include "core/gpu.h"
#include "core/tensor.h"
#include "ops/dispatch.h"

namespace tidal::ops {

namespace cpu {
void cast(Tensor& dst, const Tensor& src);
}
namespace meta {  // ops/meta/: what the op costs, on meta tensors
void cast(Tensor& dst, const Tensor& src);
}  // namespace meta
#if TIDAL_CUDA
namespace cuda {
void cast(Tensor& dst, const Tensor& src);
}
#endif

// dst and src have the same shape; any pair of f32 / bf16 / f16. On different devices (a host
// fp32 tensor into a GPU chunk's bf16, at start-up) the cast runs on src's device into scratch of
// dst's type, which is then copied: the narrower side crosses when the cast narrows.
inline void cast(Tensor& dst, const Tensor& src) {
  if (!(dst.device() == src.device())) {
    Tensor cast_here = Tensor::empty(src.shape(), dst.dtype(), allocator_on(src.device()));
    TIDAL_OPS_DISPATCH(src, cast, cast_here, src);
    dst.copy_from(cast_here);
    return;
  }
  TIDAL_OPS_DISPATCH(src, cast, dst, src);
}

}  // namespace tidal::ops
