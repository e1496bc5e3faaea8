// SwiGLU on the GPU (ops/swiglu.h; Shazeer 2020, "GLU Variants Improve Transformer"):
// y = silu(gate) * up over a fused [gate | up] row, a thread per output element, grid-stride.
#include "ops/swiglu.h"

#include "ops/cuda/common.cuh"

namespace tidal::ops::cuda {
namespace {

constexpr int kThreads = 256;

// ---- kernels ----

// 1 / (1 + e^-g): expf(-g) overflows to inf for g < -88.7 and the quotient is then 0, as it should.
__device__ __forceinline__ float sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

// gate_up: [N, 2I]; y: [N, I].
template <class T>
__global__ void swiglu_forward_kernel(T* __restrict__ y, const T* __restrict__ gate_up, std::int64_t n,
                                      std::int64_t I) {
  TIDAL_CUDA_FOR(k, n) {
    const std::int64_t row = k / I, c = k % I;
    const float g = load(gate_up[row * 2 * I + c]), u = load(gate_up[row * 2 * I + I + c]);
    y[k] = store<T>(g * sigmoid(g) * u);
  }
}

// d gate = dy up silu'(g), silu'(g) = sig(g) (1 + g (1 - sig(g))); d up = dy silu(g). dgate_up
// may alias gate_up (an element's gate and up are read by the thread that writes their
// gradients): no __restrict__ on them.
template <class T>
__global__ void swiglu_backward_kernel(T* dgate_up, const T* __restrict__ dy, const T* gate_up, std::int64_t n,
                                       std::int64_t I) {
  TIDAL_CUDA_FOR(k, n) {
    const std::int64_t row = k / I, c = k % I;
    const std::int64_t gi = row * 2 * I + c, ui = gi + I;
    const float g = load(gate_up[gi]), u = load(gate_up[ui]), d = load(dy[k]);
    const float s = sigmoid(g);
    dgate_up[gi] = store<T>(d * u * s * (1.0f + g * (1.0f - s)));
    dgate_up[ui] = store<T>(d * g * s);
  }
}

void expect_swiglu_shapes(const Tensor& out, const Tensor& gate_up, const char* what) {
  const std::int64_t width = gate_up.dim(-1);
  TIDAL_ASSERT(width % 2 == 0 && out.dim(-1) == width / 2 && rows_of(out) == rows_of(gate_up) &&
                   out.dtype() == gate_up.dtype(),
               "{}: {} must be {} with half its last dimension (and [gate | up] an even width)", what, out.str(),
               gate_up.str());
}

}  // namespace

// ---- launchers ----

void swiglu_forward(Tensor& y, const Tensor& gate_up) {
  expect_cuda_contiguous({&y, &gate_up}, "swiglu_forward operand");
  expect_swiglu_shapes(y, gate_up, "swiglu_forward y");
  const std::int64_t n = y.numel(), I = y.dim(-1);
  if (n == 0) return;
  with_float_type(y.dtype(), [&]<class T>() {
    swiglu_forward_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, compute_stream()>>>(ptr<T>(y), ptr<T>(gate_up),
                                                                                          n, I);
  });
  TIDAL_CUDA_CHECK_LAUNCH("swiglu_forward_kernel");
}

void swiglu_backward(Tensor& dgate_up, const Tensor& dy, const Tensor& gate_up) {
  expect_cuda_contiguous({&dgate_up, &dy, &gate_up}, "swiglu_backward operand");
  expect_same(dgate_up, gate_up, "swiglu_backward dgate_up/gate_up");
  expect_swiglu_shapes(dy, gate_up, "swiglu_backward dy");
  const std::int64_t n = dy.numel(), I = dy.dim(-1);
  if (n == 0) return;
  with_float_type(dy.dtype(), [&]<class T>() {
    swiglu_backward_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, compute_stream()>>>(
        ptr<T>(dgate_up), ptr<T>(dy), ptr<T>(gate_up), n, I);
  });
  TIDAL_CUDA_CHECK_LAUNCH("swiglu_backward_kernel");
}

}  // namespace tidal::ops::cuda
