// Backend-independent parts of the gradient-norm family: the global norm over many tensors
// and clipping, built on the per-backend sum of squares and scale.
#include "ops/grad_norm.h"

#include "ops/residual.h"

#include <algorithm>
#include <cmath>

namespace tidal::ops {

double global_norm(std::span<const Tensor> tensors) {
  double total = 0.0;
  for (const Tensor& t : tensors) total += sum_of_squares(t);
  return std::sqrt(total);
}

double clip_grad_norm(std::span<Tensor> grads, double max_norm) {
  const double norm = global_norm(grads);
  clip_to_norm(grads, norm, max_norm);
  return norm;
}

double clip_factor(double norm, double max_norm) {
  return max_norm > 0 ? std::min(1.0, max_norm / (norm + 1e-6)) : 1.0;
}

void clip_to_norm(std::span<Tensor> grads, double norm, double max_norm) {
  const double coef = clip_factor(norm, max_norm);
  if (coef < 1.0)
    for (Tensor& g : grads) scale(g, float(coef));
}

}  // namespace tidal::ops
