#include "ops/nf4.h"

#include "ops/cpu/typed.h"

namespace tidal::ops::cpu {

// Block by block: the block's 16 values NF4[k] x absmax rounded once into the output type, then
// each byte's two codes looked up (the high nibble first) - a table lookup an element.
void nf4_dequantize(Tensor& out, const Nf4Weight& w) {
  expect_cpu_contiguous(out, "nf4_dequantize out");
  TIDAL_ASSERT(out.shape() == w.shape, "nf4_dequantize of {} into {}", w.shape.str(), out.str());
  const Tensor absmax = nf4_absmax(w);
  const float* scale = absmax.data<float>();
  const std::uint8_t* codes = w.codes.data<std::uint8_t>();
  const std::array<float, 16>& values = nf4_values();
  const std::int64_t n = out.numel(), blocks = w.blocks();
  with_float_type(out.dtype(), [&]<class T>() {
    T* y = out.data<T>();
#pragma omp parallel for schedule(static)
    for (std::int64_t b = 0; b < blocks; ++b) {
      T table[16];
      for (int k = 0; k < 16; ++k) table[k] = from_float<T>(values[std::size_t(k)] * scale[b]);
      const std::int64_t begin = b * kNf4Block, end = std::min(n, begin + kNf4Block);
      std::int64_t i = begin;
      for (; i + 1 < end; i += 2) {  // blocks start on even elements: whole bytes
        const std::uint8_t byte = codes[i / 2];
        y[i] = table[byte >> 4];
        y[i + 1] = table[byte & 0xf];
      }
      if (i < end) y[i] = table[codes[i / 2] >> 4];  // an odd size's last element
    }
  });
}

}  // namespace tidal::ops::cpu
