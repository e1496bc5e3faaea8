// Rotary embeddings on the CPU (ops/rotary.h): RoFormer's rotation (Su et al. 2021) in the
// "rotate_half" layout of Hugging Face's Llama, where feature i pairs with i + hd/2 (not the
// paper's interleaved 2i, 2i+1; Meta's checkpoints are permuted to this layout on conversion).
// In place on a fused qkv; the token rows run in parallel.
#include "ops/rotary.h"

#include "ops/cpu/typed.h"
#include "ops/rotary_layout.h"

namespace tidal::ops::cpu {

void rotary_apply(Tensor& qkv, const Tensor& cos, const Tensor& sin, const RotaryOptions& opt) {
  expect_cpu_contiguous({&qkv, &cos, &sin}, "rotary_apply operand");
  const RotaryLayout l = rotary_layout(qkv, cos, sin, opt);
  // Rotating by -angle (the transpose, hence the backward) is the same rotation with sin negated.
  const float sign = opt.inverse ? -1.0f : 1.0f;
  const std::int64_t half = l.half;
  with_float_type(qkv.dtype(), [&]<class T>() {
    T* p = qkv.data<T>();
    const float* pc = cos.data<float>();
    const float* ps = sin.data<float>();
#pragma omp parallel for schedule(static)
    for (std::int64_t r = 0; r < l.rows; ++r) {
      const std::int64_t t = l.positions ? l.positions[r] : r % l.seq_len;
      const float* cr = pc + t * half;
      const float* sr = ps + t * half;
      // The q heads and then the k heads are adjacent at the start of the row: one span.
      for (std::int64_t h = 0; h < l.rotated_heads; ++h) {
        T* x = p + r * l.width + h * 2 * half;
#pragma omp simd
        for (std::int64_t i = 0; i < half; ++i) {
          const float a = to_float(x[i]), b = to_float(x[i + half]);
          const float c = cr[i], s = sign * sr[i];
          // x * cos + rotate_half(x) * sin, rotate_half(x) = (-x2, x1)
          x[i] = from_float<T>(a * c - b * s);
          x[i + half] = from_float<T>(b * c + a * s);
        }
      }
    }
  });
}

}  // namespace tidal::ops::cpu
