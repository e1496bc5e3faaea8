#include "ops/gemm.h"

namespace tidal::ops {

GemmDims gemm_dims(const Tensor& c, const Tensor& a, const Tensor& b, const GemmOptions& opt) {
  const int nd = c.ndim();
  TIDAL_ASSERT((nd == 2 || nd == 3) && a.ndim() == nd && b.ndim() == nd, "gemm ranks {} {} {}", a.str(), b.str(),
               c.str());
  const std::int64_t batch = nd == 3 ? c.dim(0) : 1;
  const std::int64_t m = opt.trans_a ? a.dim(-1) : a.dim(-2);
  const std::int64_t k = opt.trans_a ? a.dim(-2) : a.dim(-1);
  const std::int64_t kb = opt.trans_b ? b.dim(-1) : b.dim(-2);
  const std::int64_t n = opt.trans_b ? b.dim(-2) : b.dim(-1);
  TIDAL_ASSERT(k == kb && c.dim(-2) == m && c.dim(-1) == n && (nd == 2 || (a.dim(0) == batch && b.dim(0) == batch)),
               "gemm shapes a {} b {} c {} (trans {} {})", a.str(), b.str(), c.str(), opt.trans_a, opt.trans_b);
  TIDAL_ASSERT(opt.bias == nullptr || (opt.bias->numel() == n && opt.bias->dtype() == c.dtype() &&
                                       opt.bias->device() == c.device() && opt.bias->is_contiguous()),
               "gemm bias {} for c {}", opt.bias ? opt.bias->str() : "", c.str());
  return {batch, m, n, k};
}

}  // namespace tidal::ops
