// NF4 (QLoRA, Dettmers et al. 2023, sec. 3): a weight in 4-bit NormalFloat codes, each block of 64
// scaled by its absolute maximum, and those absmax values themselves quantized (double
// quantization: their mean subtracted, then 8 bits each over blocks of 256 with bitsandbytes'
// signed dynamic code), as bitsandbytes' Linear4bit stores a weight (quant_type "nf4",
// compress_statistics). About 0.52 bytes a parameter.
//
// Layouts follow bitsandbytes': two codes a byte, the element with the lower index in the high
// nibble; a code is the index of the nearest of the 16 NF4 values to x / absmax; an absmax's 8-bit
// code the index of the nearest of the 256 dynamic values to (absmax - offset) / its block's
// maximum. Dequantizing: NF4[code] x absmax in fp32, absmax = dynamic[code] x scale + offset.
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

#include <array>

namespace tidal::ops {

inline constexpr std::int64_t kNf4Block = 64;         // elements sharing an absmax
inline constexpr std::int64_t kNf4StatsBlock = 256;   // absmax values sharing a scale

// The 16 NF4 values (the QLoRA paper's appendix E, as bitsandbytes holds them), ascending.
const std::array<float, 16>& nf4_values();
// bitsandbytes' create_dynamic_map(signed=True): 256 values in [-1, 1], ascending.
const std::array<float, 256>& dynamic_code();

// The bytes an NF4 weight of n elements holds: its codes, the absmax codes and scales, the offset.
constexpr std::int64_t nf4_bytes(std::int64_t n) {
  const std::int64_t blocks = (n + kNf4Block - 1) / kNf4Block;
  return (n + 1) / 2 + blocks + 4 * ((blocks + kNf4StatsBlock - 1) / kNf4StatsBlock) + 4;
}

struct Nf4Weight {
  Shape shape;          // the weight's
  Tensor codes;         // u8 [ceil(numel / 2)]
  Tensor absmax_codes;  // u8 [blocks]: each block's absmax, double-quantized
  Tensor absmax_scales;  // f32 [ceil(blocks / kNf4StatsBlock)]
  float absmax_offset = 0;  // the mean of the blocks' absmax values
  std::int64_t blocks() const { return (shape.numel() + kNf4Block - 1) / kNf4Block; }
  std::int64_t bytes() const { return nf4_bytes(shape.numel()); }
  // The same weight's codes in memory from `alloc` (a GPU's, for its kernels).
  Nf4Weight to(Allocator& alloc) const;
};

// Quantizes w (host, any float dtype, contiguous) into host memory.
Nf4Weight nf4_quantize(const Tensor& w);
// An NF4 weight of `shape` in memory from `alloc` whose codes are never read: a planned step's
// (on meta memory, core/device.h).
Nf4Weight nf4_shaped(const Shape& shape, Allocator& alloc);
// Each block's absmax as dequantizing reads it (host, f32 [blocks]).
Tensor nf4_absmax(const Nf4Weight& w);
// Where a block of the weight starts: its first row and column (of the weight as a matrix
// [shape[0], the rest]).
struct Nf4Tile {
  std::int64_t first_row = 0, first_col = 0;
};
// The weight's row length; checks that out is the whole weight (at {0, 0}) or a block of the
// matrix [rows, columns] inside it.
std::int64_t nf4_row_length(const Tensor& out, const Nf4Weight& w, Nf4Tile at);

namespace cpu {
void nf4_dequantize(Tensor& out, const Nf4Weight& w, Nf4Tile at);
}
namespace meta {
void nf4_dequantize(Tensor& out, const Nf4Weight& w, Nf4Tile at);
}
#if TIDAL_CUDA
namespace cuda {
void nf4_dequantize(Tensor& out, const Nf4Weight& w, Nf4Tile at);
}
#endif

// out (f32 / bf16 / f16, contiguous, on w's codes' device) = the weight w stands for, or the block
// of it at `at` of out's shape (nn/linear.h's products of an NF4 weight, a tile at a time).
inline void nf4_dequantize(Tensor& out, const Nf4Weight& w, Nf4Tile at = {}) {
  TIDAL_OPS_DISPATCH(out, nf4_dequantize, out, w, at);
}

}  // namespace tidal::ops
