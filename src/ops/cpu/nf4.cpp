#include "ops/nf4.h"

#include "ops/cpu/typed.h"

namespace tidal::ops::cpu {

void nf4_dequantize(Tensor& out, const Nf4Weight& w) {
  expect_cpu_contiguous(out, "nf4_dequantize out");
  TIDAL_ASSERT(out.shape() == w.shape, "nf4_dequantize of {} into {}", w.shape.str(), out.str());
  const Tensor absmax = nf4_absmax(w);
  const float* scale = absmax.data<float>();
  const std::uint8_t* codes = w.codes.data<std::uint8_t>();
  const std::array<float, 16>& values = nf4_values();
  const std::int64_t n = out.numel();
  with_float_type(out.dtype(), [&]<class T>() {
    T* y = out.data<T>();
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      const std::uint8_t c = i % 2 == 0 ? codes[i / 2] >> 4 : codes[i / 2] & 0xf;
      y[i] = from_float<T>(values[c] * scale[i / kNf4Block]);
    }
  });
}

}  // namespace tidal::ops::cpu
