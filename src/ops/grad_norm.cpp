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
  // The host's tensors in one batch and the GPU's in another (offload may leave some of a list
  // on the host); meta tensors one at a time.
  std::vector<Tensor> host, gpu;
  std::vector<std::size_t> host_at, gpu_at;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    if (xs[i].device().is_meta()) {
      sums[i] = sum_of_squares(xs[i]);
    } else {
      (xs[i].device().is_cpu() ? host : gpu).push_back(xs[i]);
      (xs[i].device().is_cpu() ? host_at : gpu_at).push_back(i);
    }
  }
  const auto put = [&](const std::vector<double>& got, const std::vector<std::size_t>& at) {
    for (std::size_t k = 0; k < at.size(); ++k) sums[at[k]] = got[k];
  };
  put(cpu::sums_of_squares(host), host_at);
#if TIDAL_CUDA
  put(cuda::sums_of_squares(gpu), gpu_at);
#else
  TIDAL_CHECK(gpu.empty(),
              "op sums_of_squares got a tensor on {}, and this build has no CUDA backend (rebuild with nvcc "
              "installed: cmake -DTIDAL_CUDA=ON)",
              gpu.front().device().str());
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
