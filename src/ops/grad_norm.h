// Global gradient norm and clipping.
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

#include <span>
#include <vector>

namespace tidal::ops {

namespace cpu {
double sum_of_squares(const Tensor& x);
std::vector<double> sums_of_squares(std::span<const Tensor> xs);
}
namespace meta {  // ops/meta/: what the op costs, on meta tensors
double sum_of_squares(const Tensor& x);
}  // namespace meta
#if TIDAL_CUDA
namespace cuda {
double sum_of_squares(const Tensor& x);
std::vector<double> sums_of_squares(std::span<const Tensor> xs);
}
#endif

// Sum of squares of one tensor, accumulated in double. A GPU tensor's sum comes back to the
// host, so the call waits for the compute stream. (The dispatch is written out: the macro
// returns no value.)
inline double sum_of_squares(const Tensor& x) {
  const OpTimer timer(OpFamily::optimizer);
  if (x.device().is_meta()) return meta::sum_of_squares(x);
#if TIDAL_CUDA
  if (x.device().is_cuda()) return cuda::sum_of_squares(x);
#else
  TIDAL_CHECK(!x.device().is_cuda(),
              "op sum_of_squares got a tensor on {}, and this build has no CUDA backend (rebuild with nvcc "
              "installed: cmake -DTIDAL_CUDA=ON)",
              x.device().str());
#endif
  return cpu::sum_of_squares(x);
}

// sum_of_squares of each tensor, bitwise the same, in one batch: where the tensors are on the
// GPU, the host waits once for all of them, not once a tensor; on the host, one parallel region
// for them all.
std::vector<double> sums_of_squares(std::span<const Tensor> xs);

// The L2 norm over all tensors, as one vector.
double global_norm(std::span<const Tensor> tensors);
// Scales all tensors by max_norm / (norm + 1e-6) when the norm exceeds max_norm (PyTorch's
// clip_grad_norm_); returns the norm before clipping.
double clip_grad_norm(std::span<Tensor> grads, double max_norm);
// The factor clipping multiplies gradients of global norm `norm` by (torch.nn.utils.clip_grad_norm_'s
// max_norm / (norm + 1e-6), at most 1); 1 where max_norm <= 0 (clipping off).
double clip_factor(double norm, double max_norm);
// The scaling step of clipping, for a norm computed elsewhere (over shards on many ranks).
void clip_to_norm(std::span<Tensor> grads, double norm, double max_norm);

}  // namespace tidal::ops
