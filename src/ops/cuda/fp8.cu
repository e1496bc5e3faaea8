// fp8 on the GPU (ops/fp8.h): the tensor's largest magnitude by one reduction into a device word,
// then the cast reads it and scales in the same kernel, so nothing waits for the host. The GEMM is
// cuBLASLt's with per-tensor scale pointers (ops/cuda/cublaslt.h).
#include "ops/fp8.h"

#include "ops/cuda/common.cuh"
#include "ops/cuda/cublaslt.h"

#include <cuda_fp8.h>

namespace tidal::ops::cuda {
namespace {

constexpr int kThreads = 256;

// amax's bits: for |x| the IEEE bits order as the values do, and NaN's lie above infinity's, so
// an unsigned maximum of the bits is the float maximum with NaN winning (as the CPU's).
template <class T>
__global__ void fp8_amax_kernel(unsigned* amax_bits, const T* x, std::int64_t n) {
  unsigned m = 0;
  TIDAL_CUDA_FOR(i, n) m = max(m, __float_as_uint(fabsf(load(x[i]))));
  m = __reduce_max_sync(0xffffffffu, m);
  if (threadIdx.x % 32 == 0) atomicMax(amax_bits, m);
}

__device__ __forceinline__ std::uint8_t fp8_of(float v, Fp8Format f) {
  return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, f == Fp8Format::e4m3 ? __NV_E4M3 : __NV_E5M2);
}

template <class T>
__global__ void fp8_quantize_kernel(std::uint8_t* q, float* scale_inv, const T* x, const unsigned* amax_bits,
                                    std::int64_t rows, std::int64_t cols, Fp8Format format, bool transpose) {
  const float scale = fp8_scale(__uint_as_float(*amax_bits), format);
  if (blockIdx.x == 0 && threadIdx.x == 0) *scale_inv = 1.0f / scale;
  TIDAL_CUDA_FOR(i, rows * cols) {
    const std::int64_t r = i / cols, c = i % cols;
    q[transpose ? c * rows + r : i] = fp8_of(load(x[i]) * scale, format);
  }
}

cudaDataType_t fp8_type(Fp8Format f) { return f == Fp8Format::e4m3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; }

}  // namespace

void fp8_quantize(Tensor& q, Tensor& scale_inv, const Tensor& x, Fp8Format format, bool transpose) {
  expect_cuda_contiguous({&q, &scale_inv, &x}, "fp8_quantize");
  const Fp8QuantizeDims d = fp8_quantize_dims(q, scale_inv, x, transpose);
  const std::int64_t n = d.rows * d.cols;
  Tensor amax = Tensor::zeros({1}, DType::i32, gpu_allocator());
  with_float_type(x.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, __half>) {
      unsigned* bits = ptr<unsigned>(amax);
      if (n > 0) {
        fp8_amax_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, compute_stream()>>>(bits, ptr<const T>(x), n);
        TIDAL_CUDA_CHECK_LAUNCH("fp8_amax_kernel");
      }
      fp8_quantize_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, compute_stream()>>>(
          ptr<std::uint8_t>(q), ptr<float>(scale_inv), ptr<const T>(x), bits, d.rows, d.cols, format, transpose);
      TIDAL_CUDA_CHECK_LAUNCH("fp8_quantize_kernel");
    }
  });
}

void gemm_fp8(Tensor& c, const Tensor& a, const Tensor& a_scale_inv, Fp8Format a_format, const Tensor& b,
              const Tensor& b_scale_inv, Fp8Format b_format, float beta) {
  expect_cuda_contiguous({&c, &a, &a_scale_inv, &b, &b_scale_inv}, "gemm_fp8");
  const Fp8GemmDims d = fp8_gemm_dims(c, a, a_scale_inv, b, b_scale_inv);
  TIDAL_CHECK(d.m % 16 == 0 && d.n % 16 == 0 && d.k % 16 == 0,
              "fp8 GEMM of m {} n {} k {}: cuBLASLt's fp8 kernels take multiples of 16 (model widths and the "
              "tokens of a micro-batch)",
              d.m, d.n, d.k);
  TIDAL_CHECK(a_format == Fp8Format::e4m3 || b_format == Fp8Format::e4m3,
              "fp8 GEMM of two e5m2 tensors: cuBLASLt multiplies e4m3 by e4m3 or by e5m2");
  if (d.m == 0 || d.n == 0) return;
  if (d.k == 0) {
    if (beta == 0.0f) c.zero_();
    TIDAL_ASSERT(beta == 0.0f || beta == 1.0f, "gemm_fp8 with k 0 and beta {}", beta);
    return;
  }
  MatmulProblem p;
  p.m = d.m;
  p.n = d.n;
  p.k = d.k;
  p.trans_b = true;  // b [n, k]: cuBLASLt's A transposed, its B not (the "TN" form fp8 needs)
  p.a_type = fp8_type(a_format);
  p.b_type = fp8_type(b_format);
  p.c_type = c.dtype() == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F;
  p.scaled = true;
  lt_matmul(p, a.raw(), b.raw(), c.raw(), 1.0f, beta, nullptr, ptr<const float>(a_scale_inv),
            ptr<const float>(b_scale_inv));
}

}  // namespace tidal::ops::cuda
