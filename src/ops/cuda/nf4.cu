// NF4 dequantization on the GPU (ops/nf4.h): a grid-stride loop over the elements of the weight or of its
// block, each its NF4 block's absmax from the double-quantized codes, NF4[code] x absmax in fp32 rounded once - the CPU backend's bits.
#include "ops/nf4.h"

#include "ops/cuda/common.cuh"

namespace tidal::ops::cuda {
namespace {

struct Nf4Tables {
  float values[16];
  float dynamic[256];
};

template <class T>
__global__ void nf4_dequantize_kernel(T* y, std::int64_t n, std::int64_t cols, std::int64_t row, Nf4Tile at,
                                      const std::uint8_t* codes, const std::uint8_t* absmax_codes,
                                      const float* absmax_scales, float offset, Nf4Tables tables) {
  for (std::int64_t j = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < n;
       j += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t i = (at.first_row + j / cols) * row + at.first_col + j % cols;  // the weight's element
    const std::int64_t b = i / kNf4Block;
    const float absmax = tables.dynamic[absmax_codes[b]] * absmax_scales[b / kNf4StatsBlock] + offset;
    const std::uint8_t byte = codes[i / 2];
    const std::uint8_t c = i % 2 == 0 ? byte >> 4 : byte & 0xf;
    y[j] = store<T>(tables.values[c] * absmax);
  }
}

}  // namespace

void nf4_dequantize(Tensor& out, const Nf4Weight& w, Nf4Tile at) {
  expect_cuda_contiguous(out, "nf4_dequantize out");
  expect_cuda_contiguous({&w.codes, &w.absmax_codes, &w.absmax_scales}, "nf4_dequantize codes");
  const std::int64_t row = nf4_row_length(out, w, at), n = out.numel();
  if (n == 0) return;
  Nf4Tables tables{};
  for (int k = 0; k < 16; ++k) tables.values[k] = nf4_values()[std::size_t(k)];
  for (int k = 0; k < 256; ++k) tables.dynamic[k] = dynamic_code()[std::size_t(k)];
  constexpr int kThreads = 256;
  with_float_type(out.dtype(), [&]<class T>() {
    nf4_dequantize_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, compute_stream()>>>(
        ptr<T>(out), n, n / out.dim(0), row, at, ptr<std::uint8_t>(w.codes), ptr<std::uint8_t>(w.absmax_codes),
        ptr<float>(w.absmax_scales), w.absmax_offset, tables);
  });
  TIDAL_CUDA_CHECK_LAUNCH("nf4_dequantize_kernel");
}

}  // namespace tidal::ops::cuda
