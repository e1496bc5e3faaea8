// SwiGLU on the CPU (ops/swiglu.h; Shazeer 2020, "GLU Variants Improve Transformer"):
// y = silu(gate) * up over a fused [gate | up] row, in fp32, rows in parallel.
#include "ops/swiglu.h"

#include "ops/cpu/typed.h"
#include "ops/cpu/vec_math.h"

namespace tidal::ops::cpu {
namespace {

// sigmoid(g) = 1 / (1 + e^-g), taken through e = e^-|g| <= 1 so that exp_fast's argument is never
// positive (it would overflow past 88.7): for g < 0, sigmoid(g) = e / (1 + e).
#pragma omp declare simd notinbranch
inline float sigmoid(float g) {
  const float e = exp_fast(-__builtin_fabsf(g));
  const float r = 1.0f / (1.0f + e);
  return g >= 0.0f ? r : e * r;
}

void expect_swiglu_shapes(const Tensor& out, const Tensor& gate_up, const char* what) {
  const std::int64_t width = gate_up.dim(-1);
  TIDAL_ASSERT(width % 2 == 0 && out.dim(-1) == width / 2 && rows_of(out) == rows_of(gate_up) &&
                   out.dtype() == gate_up.dtype(),
               "{}: {} must be {} with half its last dimension (and [gate | up] an even width)", what, out.str(),
               gate_up.str());
}

}  // namespace

void swiglu_forward(Tensor& y, const Tensor& gate_up) {
  expect_cpu_contiguous({&y, &gate_up}, "swiglu_forward operand");
  expect_swiglu_shapes(y, gate_up, "swiglu_forward y");
  const std::int64_t I = y.dim(-1), N = rows_of(y);
  with_float_type(y.dtype(), [&]<class T>() {
    const T* pgu = gate_up.data<T>();
    T* py = y.data<T>();
#pragma omp parallel for schedule(static)
    for (std::int64_t n = 0; n < N; ++n) {
      const T* gate = pgu + n * 2 * I;
      const T* up = gate + I;
      T* yr = py + n * I;
#pragma omp simd
      for (std::int64_t c = 0; c < I; ++c) {
        const float g = to_float(gate[c]);
        yr[c] = from_float<T>(g * sigmoid(g) * to_float(up[c]));
      }
    }
  });
}

// d gate = dy up silu'(g), silu'(g) = sig(g) (1 + g (1 - sig(g))); d up = dy silu(g).
void swiglu_backward(Tensor& dgate_up, const Tensor& dy, const Tensor& gate_up) {
  expect_cpu_contiguous({&dgate_up, &dy, &gate_up}, "swiglu_backward operand");
  expect_same(dgate_up, gate_up, "swiglu_backward dgate_up/gate_up");
  expect_swiglu_shapes(dy, gate_up, "swiglu_backward dy");
  const std::int64_t I = dy.dim(-1), N = rows_of(dy);
  with_float_type(dy.dtype(), [&]<class T>() {
    const T* pgu = gate_up.data<T>();
    const T* pdy = dy.data<T>();
    T* pd = dgate_up.data<T>();
#pragma omp parallel for schedule(static)
    for (std::int64_t n = 0; n < N; ++n) {
      const T* gate = pgu + n * 2 * I;
      const T* up = gate + I;
      const T* dyr = pdy + n * I;
      T* dgate = pd + n * 2 * I;
      T* dup = dgate + I;
      // Both inputs of an element are read before its two gradients are written: dgate_up may
      // alias gate_up.
#pragma omp simd
      for (std::int64_t c = 0; c < I; ++c) {
        const float g = to_float(gate[c]), u = to_float(up[c]), d = to_float(dyr[c]);
        const float s = sigmoid(g);
        dgate[c] = from_float<T>(d * u * s * (1.0f + g * (1.0f - s)));
        dup[c] = from_float<T>(d * g * s);
      }
    }
  });
}

}  // namespace tidal::ops::cpu
