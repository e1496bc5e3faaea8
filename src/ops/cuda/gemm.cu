// CUDA GEMM through cuBLASLt (ops/cuda/cublaslt.h: handle, workspace, plan cache, and how row-major
// operands map onto the column-major library). Semantics are the CPU backend's: a, b, c each f32,
// bf16 or f16, products accumulated in fp32 (alpha, beta fp32), c rounded once.
//
// cuBLASLt takes a and b of one type with c of that type or fp32; those run directly. Any other
// mix (say f32 a with bf16 b) is widened to fp32 temporaries first, as the CPU backend widens
// everything: the same single rounding of c, at the cost of the copies.
#include "ops/gemm.h"

#include "core/gpu.h"
#include "ops/bias.h"
#include "ops/cast.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cublaslt.h"

namespace tidal::ops::cuda {
namespace {

constexpr int kThreads = 256;

// ---- kernels ----

// c = beta * c: the whole GEMM when k == 0 (an empty sum). beta == 0 writes zeros without reading
// c, which may hold garbage, as in a GEMM.
template <class T>
__global__ void scale_kernel(T* __restrict__ c, float beta, std::int64_t n) {
  TIDAL_CUDA_FOR(i, n) c[i] = store<T>(beta == 0.0f ? 0.0f : beta * load(c[i]));
}

cudaDataType_t cuda_data_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    case DType::i32:
    case DType::u8: break;
  }
  TIDAL_ASSERT(false, "gemm called on {}", dtype_name(dtype));
}

Tensor as_f32(const Tensor& t) {
  if (t.dtype() == DType::f32) return t;
  Tensor w = Tensor::empty(t.shape(), DType::f32, gpu_allocator());
  cuda::cast(w, t);
  return w;
}

}  // namespace

// ---- launchers ----

void gemm(Tensor& c, const Tensor& a, const Tensor& b, const GemmOptions& opt) {
  expect_cuda_contiguous(a, "gemm a");
  expect_cuda_contiguous(b, "gemm b");
  expect_cuda_contiguous(c, "gemm c");
  const auto [batch, m, n, k] = gemm_dims(c, a, b, opt);
  if (c.numel() == 0) return;
  // The bias in cuBLASLt's epilogue where it can take it (the fast path: a Linear's forward); else
  // the product first and ops::bias_add after, as the CPU backend does.
  // One matrix, and a bias 16-byte aligned (a chunk's views may start anywhere; cuBLASLt is told
  // the other operands' alignment, not the bias's).
  const bool epilogue_bias = opt.bias != nullptr && k > 0 && batch == 1 &&
                             reinterpret_cast<std::uintptr_t>(opt.bias->raw()) % 16 == 0 &&
                             a.dtype() == b.dtype() && (c.dtype() == a.dtype() || c.dtype() == DType::f32);
  if (opt.bias != nullptr && !epilogue_bias) {
    GemmOptions product = opt;
    product.bias = nullptr;
    cuda::gemm(c, a, b, product);
    cuda::bias_add(c, *opt.bias);
    return;
  }
  if (k == 0) {
    const std::int64_t total = c.numel();
    with_float_type(c.dtype(), [&]<class T>() {
      scale_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, compute_stream()>>>(ptr<T>(c), opt.beta, total);
    });
    TIDAL_CUDA_CHECK_LAUNCH("scale_kernel");
    return;
  }

  const bool direct = a.dtype() == b.dtype() && (c.dtype() == a.dtype() || c.dtype() == DType::f32);
  if (!direct) {
    const Tensor a32 = as_f32(a), b32 = as_f32(b);
    // With beta == 0 the old c is not read, so its fp32 twin needs no copy of it.
    Tensor c32 = c.dtype() == DType::f32 ? c
                 : opt.beta == 0.0f      ? Tensor::empty(c.shape(), DType::f32, gpu_allocator())
                                         : as_f32(c);
    cuda::gemm(c32, a32, b32, opt);  // qualified: GemmOptions would find ops::gemm by ADL
    if (c.dtype() != DType::f32) cuda::cast(c, c32);
    return;
  }

  MatmulProblem problem;
  problem.batch = batch;
  problem.m = m;
  problem.n = n;
  problem.k = k;
  problem.trans_a = opt.trans_a;
  problem.trans_b = opt.trans_b;
  problem.a_type = problem.b_type = cuda_data_type(a.dtype());
  problem.c_type = cuda_data_type(c.dtype());
  problem.compute = opt.tf32 && a.dtype() == DType::f32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  problem.bias = epilogue_bias;
  if (!lt_matmul(problem, a.raw(), b.raw(), c.raw(), opt.alpha, opt.beta, epilogue_bias ? opt.bias->raw() : nullptr)) {
    // No algorithm adds this bias in its epilogue: the product, then the bias.
    problem.bias = false;
    lt_matmul(problem, a.raw(), b.raw(), c.raw(), opt.alpha, opt.beta);
    cuda::bias_add(c, *opt.bias);
  }
}

}  // namespace tidal::ops::cuda
