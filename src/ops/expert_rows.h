// The row moves of a mixture of experts (nn/moe.h): tokens gathered into their experts' batches
// and the experts' outputs combined back, each token's rows by the weights its router gave
// (Shazeer et al. 2017; Fedus et al. 2022, "Switch Transformers"). A slot is one (token, pick)
// pair's row in the experts' batches; every sum runs in a fixed order (a token's picks in their
// order), so the result does not depend on threads.
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace tidal::ops {

namespace cpu {
void gather_rows(Tensor& out, const Tensor& x, const Tensor& rows, const Tensor& scale);
void combine_rows(Tensor& out, const Tensor& src, const Tensor& slots, const Tensor& weights);
void slot_dots(Tensor& out, const Tensor& a, const Tensor& src, const Tensor& slots);
}  // namespace cpu
namespace meta {  // ops/meta/: what the op costs, on meta tensors
void gather_rows(Tensor& out, const Tensor& x, const Tensor& rows, const Tensor& scale);
void combine_rows(Tensor& out, const Tensor& src, const Tensor& slots, const Tensor& weights);
void slot_dots(Tensor& out, const Tensor& a, const Tensor& src, const Tensor& slots);
}  // namespace meta
#if TIDAL_CUDA
namespace cuda {
void gather_rows(Tensor& out, const Tensor& x, const Tensor& rows, const Tensor& scale);
void combine_rows(Tensor& out, const Tensor& src, const Tensor& slots, const Tensor& weights);
void slot_dots(Tensor& out, const Tensor& a, const Tensor& src, const Tensor& slots);
}  // namespace cuda
#endif

// out [P, C] = x [N, C] rows `rows` (i32 [P], each in [0, N), or -1 for a row of zeros), each
// times scale[p] (fp32 [P]) when scale is defined. out and x share a dtype (fp32, bf16 or fp16); products in fp32.
inline void gather_rows(Tensor& out, const Tensor& x, const Tensor& rows, const Tensor& scale = {}) {
  TIDAL_OPS_DISPATCH(x, gather_rows, out, x, rows, scale);
}
// out [N, C] (written) = for each row n, the sum over its picks j of weights[n, j] (fp32 [N, k];
// 1 when undefined) times src [P, C] row slots[n, j] (i32 [N, k]; -1: a dropped pick, no row),
// summed in fp32 in pick order.
inline void combine_rows(Tensor& out, const Tensor& src, const Tensor& slots, const Tensor& weights = {}) {
  TIDAL_OPS_DISPATCH(src, combine_rows, out, src, slots, weights);
}
// out fp32 [N, k] = the dot product of a [N, C] row n and src [P, C] row slots[n, j] (0 for a
// dropped pick): the gradient of combine_rows' weights.
inline void slot_dots(Tensor& out, const Tensor& a, const Tensor& src, const Tensor& slots) {
  TIDAL_OPS_DISPATCH(a, slot_dots, out, a, src, slots);
}

}  // namespace tidal::ops
