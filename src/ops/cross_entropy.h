// Fused softmax + cross-entropy with an ignore index. Forward keeps only the per-row
// log-sum-exp; backward recomputes the probabilities from the logits, so the [N, V] probability
// matrix is never stored beside the logits.
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace tidal::ops {

inline constexpr std::int32_t kIgnoreIndex = -100;

namespace cpu {
void cross_entropy_forward(Tensor& losses, Tensor& lse, const Tensor& logits, const Tensor& targets);
void cross_entropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& lse, const Tensor& targets,
                            float scale);
}  // namespace cpu

// logits [N, V]; targets [N] i32 (kIgnoreIndex rows give loss 0); losses, lse: [N] fp32.
inline void cross_entropy_forward(Tensor& losses, Tensor& lse, const Tensor& logits, const Tensor& targets) {
  TIDAL_OPS_DISPATCH(logits, cross_entropy_forward, losses, lse, logits, targets);
}
// dlogits = scale * (softmax(logits) - onehot(target)) on non-ignored rows, 0 on ignored ones.
// scale = dloss / (number of non-ignored rows) for a mean loss.
inline void cross_entropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& lse,
                                   const Tensor& targets, float scale) {
  TIDAL_OPS_DISPATCH(logits, cross_entropy_backward, dlogits, logits, lse, targets, scale);
}

}  // namespace tidal::ops
