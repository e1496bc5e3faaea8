// Casts between fp32, bf16 and fp16 (round to nearest even).
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace tidal::ops {

namespace cpu {
void cast(Tensor& dst, const Tensor& src);
}
#if TIDAL_CUDA
namespace cuda {
void cast(Tensor& dst, const Tensor& src);
}
#endif

// dst and src have the same shape; any pair of f32 / bf16 / f16.
inline void cast(Tensor& dst, const Tensor& src) { TIDAL_OPS_DISPATCH(src, cast, dst, src); }

}  // namespace tidal::ops
