// The row products of a LayerNorm or RMSNorm whose features are split over ranks (2D, 2.5D and 3D
// tensor parallelism: nn/tp/split_norm.h). A row's statistics need all its features, so each rank
// sums its part of them (split_norm_sums), the module sums those over the feature group, and
// every rank normalizes its part by the whole row's (split_norm_forward); backward does the same
// with the input gradient's two sums. On the device the tensors live on: no copy to the host.
//
// Everything is fp32 (the module widens 16-bit activations and parameters on the device and
// rounds y and dx once). `stats` [N, 2] carries each row's sums into split_norm_forward, which
// overwrites them with the row's (mean, rstd) for backward. RMSNorm is the uncentered case: its
// mean is 0, it has no bias, and its first sum is 0.
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace tidal::ops {

struct SplitNormOptions {
  bool centered = true;    // LayerNorm (subtract the mean); false: RMSNorm
  std::int64_t full = 0;   // C, the whole row's features (x holds C' of them)
  float eps = 1e-5f;
};

namespace cpu {
void split_norm_sums(Tensor& stats, const Tensor& x, const SplitNormOptions& opt);
void split_norm_forward(Tensor& y, Tensor& stats, const Tensor& x, const Tensor& w, const Tensor& b,
                        const SplitNormOptions& opt);
void split_norm_weight_grads(Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& stats);
void split_norm_grad_sums(Tensor& sums, const Tensor& dy, const Tensor& x, const Tensor& stats, const Tensor& w,
                          const SplitNormOptions& opt);
void split_norm_backward(Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& stats, const Tensor& w,
                         const Tensor& sums, const SplitNormOptions& opt);
}  // namespace cpu
namespace meta {  // ops/meta/: what the op costs, on meta tensors
void split_norm_sums(Tensor& stats, const Tensor& x, const SplitNormOptions& opt);
void split_norm_forward(Tensor& y, Tensor& stats, const Tensor& x, const Tensor& w, const Tensor& b,
                        const SplitNormOptions& opt);
void split_norm_weight_grads(Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& stats);
void split_norm_grad_sums(Tensor& sums, const Tensor& dy, const Tensor& x, const Tensor& stats, const Tensor& w,
                          const SplitNormOptions& opt);
void split_norm_backward(Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& stats, const Tensor& w,
                         const Tensor& sums, const SplitNormOptions& opt);
}  // namespace meta
#if TIDAL_CUDA
namespace cuda {
void split_norm_sums(Tensor& stats, const Tensor& x, const SplitNormOptions& opt);
void split_norm_forward(Tensor& y, Tensor& stats, const Tensor& x, const Tensor& w, const Tensor& b,
                        const SplitNormOptions& opt);
void split_norm_weight_grads(Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& stats);
void split_norm_grad_sums(Tensor& sums, const Tensor& dy, const Tensor& x, const Tensor& stats, const Tensor& w,
                          const SplitNormOptions& opt);
void split_norm_backward(Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& stats, const Tensor& w,
                         const Tensor& sums, const SplitNormOptions& opt);
}  // namespace cuda
#endif

namespace split_norm_detail {
// The shapes and types every backend takes: fp32 x [N, C'] with `rows` [N, 2] (stats or sums).
inline void expect_rows(const Tensor& x, const Tensor& rows, const char* what) {
  const std::int64_t N = x.ndim() == 0 ? 1 : x.numel() / x.dim(-1);
  TIDAL_ASSERT(x.dtype() == DType::f32 && rows.dtype() == DType::f32 && rows.numel() == 2 * N,
               "{}: x {} (fp32 [N, C']) and {} (fp32 [N, 2])", what, x.str(), rows.str());
}
// A parameter or gradient of the features (undefined: none): fp32 [C'].
inline void expect_features(const Tensor& t, const Tensor& x, const char* what) {
  TIDAL_ASSERT(!t.defined() || (t.dtype() == DType::f32 && t.numel() == x.dim(-1)), "{}: {} for {} features (fp32)",
               what, t.defined() ? t.str() : "", x.dim(-1));
}
inline void expect_same(const Tensor& a, const Tensor& x, const char* what) {
  TIDAL_ASSERT(a.shape() == x.shape() && a.dtype() == x.dtype(), "{}: {} for x {}", what, a.str(), x.str());
}
}  // namespace split_norm_detail

// x [N, C'] fp32 -> stats [N, 2]: the row's sum over its C' features (0 when not centered) and
// its sum of squares.
inline void split_norm_sums(Tensor& stats, const Tensor& x, const SplitNormOptions& opt) {
  split_norm_detail::expect_rows(x, stats, "split_norm_sums");
  TIDAL_OPS_DISPATCH(x, split_norm_sums, stats, x, opt);
}
// stats in: the sums over all C features; out: (mean, rstd), mean = sum / C (0 when not
// centered), rstd = 1 / sqrt(sum of squares / C - mean^2 + eps). y = (x - mean) rstd w + b; b
// undefined for none (RMSNorm). y, x: [N, C']; w, b: [C'].
inline void split_norm_forward(Tensor& y, Tensor& stats, const Tensor& x, const Tensor& w, const Tensor& b,
                               const SplitNormOptions& opt) {
  split_norm_detail::expect_rows(x, stats, "split_norm_forward");
  split_norm_detail::expect_same(y, x, "split_norm_forward y");
  TIDAL_ASSERT(w.defined(), "split_norm_forward: no weight");
  split_norm_detail::expect_features(w, x, "split_norm_forward w");
  split_norm_detail::expect_features(b, x, "split_norm_forward b");
  TIDAL_OPS_DISPATCH(x, split_norm_forward, y, stats, x, w, b, opt);
}
// dw [C'] += sum over rows of dy xhat, xhat = (x - mean) rstd; db [C'] += sum of dy (db
// undefined: none). The sums run over the rows in order for every column: bitwise reproducible.
inline void split_norm_weight_grads(Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& stats) {
  split_norm_detail::expect_rows(x, stats, "split_norm_weight_grads");
  split_norm_detail::expect_same(dy, x, "split_norm_weight_grads dy");
  TIDAL_ASSERT(dw.defined(), "split_norm_weight_grads: no dw");
  split_norm_detail::expect_features(dw, x, "split_norm_weight_grads dw");
  split_norm_detail::expect_features(db, x, "split_norm_weight_grads db");
  TIDAL_OPS_DISPATCH(dy, split_norm_weight_grads, dw, db, dy, x, stats);
}
// sums [N, 2]: over this rank's features, the row's sum of g = dy w (0 when not centered) and
// of g xhat.
inline void split_norm_grad_sums(Tensor& sums, const Tensor& dy, const Tensor& x, const Tensor& stats, const Tensor& w,
                                 const SplitNormOptions& opt) {
  split_norm_detail::expect_rows(x, stats, "split_norm_grad_sums");
  split_norm_detail::expect_rows(x, sums, "split_norm_grad_sums");
  split_norm_detail::expect_same(dy, x, "split_norm_grad_sums dy");
  split_norm_detail::expect_features(w, x, "split_norm_grad_sums w");
  TIDAL_OPS_DISPATCH(dy, split_norm_grad_sums, sums, dy, x, stats, w, opt);
}
// From the group's sums: dx = rstd (g - sum(g) / C - xhat sum(g xhat) / C).
inline void split_norm_backward(Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& stats, const Tensor& w,
                                const Tensor& sums, const SplitNormOptions& opt) {
  split_norm_detail::expect_rows(x, stats, "split_norm_backward");
  split_norm_detail::expect_rows(x, sums, "split_norm_backward");
  split_norm_detail::expect_same(dx, x, "split_norm_backward dx");
  split_norm_detail::expect_same(dy, x, "split_norm_backward dy");
  split_norm_detail::expect_features(w, x, "split_norm_backward w");
  TIDAL_OPS_DISPATCH(dy, split_norm_backward, dx, dy, x, stats, w, sums, opt);
}

}  // namespace tidal::ops
