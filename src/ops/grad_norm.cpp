// Backend-independent parts of the gradient-norm family: the global norm over many tensors
// and clipping, built on the per-backend sum of squares and scale.
#include "ops/grad_norm.h"

#include "ops/residual.h"

#include <algorithm>
#include <cmath>

namespace tidal::ops {

std::vector<double> sums_of_squares(std::span<const Tensor> xs) {
  const OpTimer timer(OpFamily::optimizer);
  std::vector<double> sums(xs.size(), 0.0);
#if TIDAL_CUDA
  // The GPU's tensors in one batch (offload may leave some of a list on the host).
  std::vector<Tensor> on_gpu;
  std::vector<std::size_t> at;
  for (std::size_t i = 0; i < xs.size(); ++i)
    if (xs[i].device().is_cuda()) {
      on_gpu.push_back(xs[i]);
      at.push_back(i);
    }
  const std::vector<double> gpu_sums = cuda::sums_of_squares(on_gpu);
  for (std::size_t k = 0; k < at.size(); ++k) sums[at[k]] = gpu_sums[k];
  for (std::size_t i = 0; i < xs.size(); ++i)
    if (!xs[i].device().is_cuda()) sums[i] = sum_of_squares(xs[i]);
#else
  for (std::size_t i = 0; i < xs.size(); ++i) sums[i] = sum_of_squares(xs[i]);
#endif
  return sums;
}

double global_norm(std::span<const Tensor> tensors) {
  double total = 0.0;
  for (double s : sums_of_squares(tensors)) total += s;
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
