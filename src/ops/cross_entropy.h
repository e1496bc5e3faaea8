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
void cross_entropy_shard_targets(Tensor& local, const Tensor& targets, std::int64_t first, std::int64_t count,
                                 std::int64_t classes);
void cross_entropy_shard_terms(Tensor& terms, const Tensor& lse, const Tensor& max_lse, const Tensor& losses,
                               const Tensor& local);
void cross_entropy_shard_combine(Tensor& lse, Tensor& losses, const Tensor& max_lse, const Tensor& terms,
                                 const Tensor& local);
}  // namespace cpu
namespace meta {  // ops/meta/: what the op costs, on meta tensors
void cross_entropy_forward(Tensor& losses, Tensor& lse, const Tensor& logits, const Tensor& targets);
void cross_entropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& lse, const Tensor& targets,
                            float scale);
void cross_entropy_shard_targets(Tensor& local, const Tensor& targets, std::int64_t first, std::int64_t count,
                                 std::int64_t classes);
void cross_entropy_shard_terms(Tensor& terms, const Tensor& lse, const Tensor& max_lse, const Tensor& losses,
                               const Tensor& local);
void cross_entropy_shard_combine(Tensor& lse, Tensor& losses, const Tensor& max_lse, const Tensor& terms,
                                 const Tensor& local);
}  // namespace meta
#if TIDAL_CUDA
namespace cuda {
void cross_entropy_forward(Tensor& losses, Tensor& lse, const Tensor& logits, const Tensor& targets);
void cross_entropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& lse, const Tensor& targets,
                            float scale);
void cross_entropy_shard_targets(Tensor& local, const Tensor& targets, std::int64_t first, std::int64_t count,
                                 std::int64_t classes);
void cross_entropy_shard_terms(Tensor& terms, const Tensor& lse, const Tensor& max_lse, const Tensor& losses,
                               const Tensor& local);
void cross_entropy_shard_combine(Tensor& lse, Tensor& losses, const Tensor& max_lse, const Tensor& terms,
                                 const Tensor& local);
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


// Cross-entropy over classes split into shards (the vocabulary-parallel loss, nn/tp/cross_entropy.h):
// each rank runs cross_entropy_forward on its shard with the targets rebased to it, and the rows'
// figures are combined over the shards on the device the logits live on. All [N].
//
// local (i32) = targets rebased to this shard's classes [first, first + count): t - first there,
// kTargetElsewhere for a class of another shard, kIgnoreIndex kept. A target outside [0,
// classes) is the user's error, named with its position.
namespace shard_detail {
// The [N] (or [N, 2]: `per_row` 2) operands every backend takes.
inline void expect_rows(const Tensor& t, std::int64_t N, DType dtype, const char* what, int per_row = 1) {
  TIDAL_ASSERT(t.dtype() == dtype && t.numel() == per_row * N, "{}: {} for {} rows", what, t.str(), N);
}
}  // namespace shard_detail

inline void cross_entropy_shard_targets(Tensor& local, const Tensor& targets, std::int64_t first, std::int64_t count,
                                        std::int64_t classes) {
  shard_detail::expect_rows(targets, targets.numel(), DType::i32, "cross_entropy_shard_targets targets");
  shard_detail::expect_rows(local, targets.numel(), DType::i32, "cross_entropy_shard_targets local");
  TIDAL_OPS_DISPATCH(targets, cross_entropy_shard_targets, local, targets, first, count, classes);
}
// From the shard's lse and losses and the rows' maximum lse over the shards: terms [N, 2] =
// (exp(lse - max_lse), the target's logit lse - loss where the target is in this shard, else 0),
// to be summed over the shards.
inline void cross_entropy_shard_terms(Tensor& terms, const Tensor& lse, const Tensor& max_lse, const Tensor& losses,
                                      const Tensor& local) {
  const std::int64_t N = lse.numel();
  shard_detail::expect_rows(lse, N, DType::f32, "cross_entropy_shard_terms lse");
  shard_detail::expect_rows(max_lse, N, DType::f32, "cross_entropy_shard_terms max_lse");
  shard_detail::expect_rows(losses, N, DType::f32, "cross_entropy_shard_terms losses");
  shard_detail::expect_rows(local, N, DType::i32, "cross_entropy_shard_terms local");
  shard_detail::expect_rows(terms, N, DType::f32, "cross_entropy_shard_terms terms", 2);
  TIDAL_OPS_DISPATCH(lse, cross_entropy_shard_terms, terms, lse, max_lse, losses, local);
}
// From the shards' summed terms: lse = max_lse + log(terms[:, 0]), the row's log-sum-exp over all
// classes (what cross_entropy_backward then takes), and losses = lse - terms[:, 1] (0 on ignored
// rows).
inline void cross_entropy_shard_combine(Tensor& lse, Tensor& losses, const Tensor& max_lse, const Tensor& terms,
                                        const Tensor& local) {
  const std::int64_t N = lse.numel();
  shard_detail::expect_rows(losses, N, DType::f32, "cross_entropy_shard_combine losses");
  shard_detail::expect_rows(max_lse, N, DType::f32, "cross_entropy_shard_combine max_lse");
  shard_detail::expect_rows(terms, N, DType::f32, "cross_entropy_shard_combine terms", 2);
  shard_detail::expect_rows(local, N, DType::i32, "cross_entropy_shard_combine local");
  TIDAL_OPS_DISPATCH(lse, cross_entropy_shard_combine, lse, losses, max_lse, terms, local);
}

}  // namespace tidal::ops
