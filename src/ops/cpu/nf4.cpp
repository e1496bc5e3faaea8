#include "ops/nf4.h"

#include "ops/cpu/typed.h"

namespace tidal::ops::cpu {

// Row by row of the block: each NF4 block's 16 values NF4[k] x absmax rounded once into the output
// type (the absmax from its double-quantized code) as the row's elements reach it, then each
// element's code looked up (the high nibble first) - a table lookup an element.
void nf4_dequantize(Tensor& out, const Nf4Weight& w, Nf4Tile at) {
  expect_cpu_contiguous(out, "nf4_dequantize out");
  const std::int64_t row = nf4_row_length(out, w, at);
  const std::int64_t rows = out.numel() ? out.dim(0) : 0, cols = rows ? out.numel() / rows : 0;
  const std::uint8_t* codes = w.codes.data<std::uint8_t>();
  const std::uint8_t* absmax_codes = w.absmax_codes.data<std::uint8_t>();
  const float* scales = w.absmax_scales.data<float>();
  const std::array<float, 16>& values = nf4_values();
  const std::array<float, 256>& dynamic = dynamic_code();
  with_float_type(out.dtype(), [&]<class T>() {
#pragma omp parallel for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      T* y = out.data<T>() + r * cols;
      const std::int64_t begin = (at.first_row + r) * row + at.first_col;
      T table[16];
      std::int64_t block = -1;
      for (std::int64_t c = 0; c < cols; ++c) {
        const std::int64_t i = begin + c;
        if (i / kNf4Block != block) {
          block = i / kNf4Block;
          const float absmax = dynamic[absmax_codes[block]] * scales[block / kNf4StatsBlock] + w.absmax_offset;
          for (int k = 0; k < 16; ++k) table[k] = from_float<T>(values[std::size_t(k)] * absmax);
        }
        const std::uint8_t byte = codes[i / 2];
        y[c] = table[i % 2 == 0 ? byte >> 4 : byte & 0xf];
      }
    }
  });
}

}  // namespace tidal::ops::cpu
