// ViT's class token: prepending it to the patch sequence, and reading it back out for the head.
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace tidal::ops {

namespace cpu {
void prepend_token(Tensor& y, const Tensor& x, const Tensor& token);
void prepend_token_backward(Tensor& dx, Tensor& dtoken, const Tensor& dy);
void select_token(Tensor& y, const Tensor& x, std::int64_t index);
void select_token_backward(Tensor& dx, const Tensor& dy, std::int64_t index);
}  // namespace cpu
namespace meta {  // ops/meta/: what the op costs, on meta tensors
void prepend_token(Tensor& y, const Tensor& x, const Tensor& token);
void prepend_token_backward(Tensor& dx, Tensor& dtoken, const Tensor& dy);
void select_token(Tensor& y, const Tensor& x, std::int64_t index);
void select_token_backward(Tensor& dx, const Tensor& dy, std::int64_t index);
}  // namespace meta
#if TIDAL_CUDA
namespace cuda {
void prepend_token(Tensor& y, const Tensor& x, const Tensor& token);
void prepend_token_backward(Tensor& dx, Tensor& dtoken, const Tensor& dy);
void select_token(Tensor& y, const Tensor& x, std::int64_t index);
void select_token_backward(Tensor& dx, const Tensor& dy, std::int64_t index);
}  // namespace cuda
#endif

// y [B, N+1, D]: y[:, 0] = token [D], y[:, 1:] = x [B, N, D].
inline void prepend_token(Tensor& y, const Tensor& x, const Tensor& token) {
  TIDAL_OPS_DISPATCH(x, prepend_token, y, x, token);
}
// dx = dy[:, 1:]; dtoken += sum over the batch of dy[:, 0].
inline void prepend_token_backward(Tensor& dx, Tensor& dtoken, const Tensor& dy) {
  TIDAL_OPS_DISPATCH(dy, prepend_token_backward, dx, dtoken, dy);
}
// y [B, D] = x[:, index] for x [B, T, D].
inline void select_token(Tensor& y, const Tensor& x, std::int64_t index) {
  TIDAL_OPS_DISPATCH(x, select_token, y, x, index);
}
// dx [B, T, D] = 0 except dx[:, index] = dy.
inline void select_token_backward(Tensor& dx, const Tensor& dy, std::int64_t index) {
  TIDAL_OPS_DISPATCH(dy, select_token_backward, dx, dy, index);
}

}  // namespace tidal::ops
