// Fused softmax + cross-entropy with an ignore index. Forward keeps only the per-row
// log-sum-exp; backward recomputes the probabilities from the logits, so the [N, V] probability
// matrix is never stored beside the logits.
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace tidal::ops {

inline constexpr std::int32_t kIgnoreIndex = -100;
// A target that lies in another rank's shard of the classes (vocab-parallel cross-entropy):
// the row's loss is 0 here and its gradient is the softmax part alone (no one-hot).
inline constexpr std::int32_t kTargetElsewhere = -101;

namespace cpu {
void cross_entropy_forward(Tensor& losses, Tensor& lse, const Tensor& logits, const Tensor& targets);
void cross_entropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& lse, const Tensor& targets,
                            float scale);
}  // namespace cpu
namespace meta {  // ops/meta/: what the op costs, on meta tensors
void cross_entropy_forward(Tensor& losses, Tensor& lse, const Tensor& logits, const Tensor& targets);
void cross_entropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& lse, const Tensor& targets,
                            float scale);
}  // namespace meta
#if TIDAL_CUDA
namespace cuda {
void cross_entropy_forward(Tensor& losses, Tensor& lse, const Tensor& logits, const Tensor& targets);
void cross_entropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& lse, const Tensor& targets,
                            float scale);
}  // namespace cuda
#endif

// logits [N, V]; targets [N] i32 (kIgnoreIndex and kTargetElsewhere rows give loss 0; lse is
// computed for every row); losses, lse: [N] fp32.
inline void cross_entropy_forward(Tensor& losses, Tensor& lse, const Tensor& logits, const Tensor& targets) {
  TIDAL_OPS_DISPATCH(logits, cross_entropy_forward, losses, lse, logits, targets);
}
// dlogits = scale * (exp(logits - lse) - onehot(target)) on non-ignored rows (no one-hot for
// kTargetElsewhere), 0 on ignored ones. lse may be a row's global log-sum-exp over all shards.
// scale = dloss / (number of non-ignored rows) for a mean loss. dlogits may be logits itself.
inline void cross_entropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& lse,
                                   const Tensor& targets, float scale) {
  TIDAL_OPS_DISPATCH(logits, cross_entropy_backward, dlogits, logits, lse, targets, scale);
}

}  // namespace tidal::ops
