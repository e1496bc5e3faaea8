// What every flash-attention kernel shares (ops/cuda/flash_simt.cuh, the fp32 path for any dtype
// and head width; ops/cuda/flash_tensor_core.cuh, the bf16 / fp16 path): one call's shape and
// masks, which keys a query attends, the tiles causal attention visits, how a block finds its
// tile, and backward's row term D.
//
// The layout (ops/attention.h): q, k and v of (sample b, head h) are the columns [h hd, (h+1) hd)
// of the three C-wide parts of qkv [B, T, 3C]; y and dy are [B, T, C] with the same columns; lse
// and D are [B, H, T] fp32.
#pragma once

#include "ops/cuda/common.cuh"

#include <cstdint>

namespace tidal::ops::cuda {
namespace {

struct FlashShape {
  int T;                          // sequence length
  int H;                          // heads
  int hd;                         // head width
  std::int64_t C;                 // H * hd
  float scale;                    // 1 / sqrt(hd), applied to q . k
  bool causal;                    // query i attends keys j <= i
  const std::int32_t* key_mask;   // [B, T]: key j of sample b is never attended where 0; null = none
};

// Element offset of row t of sample b in qkv [B, T, 3C] and in y / dy [B, T, C].
__device__ __forceinline__ std::int64_t qkv_row(const FlashShape& s, std::int64_t b, std::int64_t t) {
  return (b * s.T + t) * 3 * s.C;
}
__device__ __forceinline__ std::int64_t out_row(const FlashShape& s, std::int64_t b, std::int64_t t) {
  return (b * s.T + t) * s.C;
}

// Whether any query may attend key j of sample b: inside the sequence and not padding.
__device__ __forceinline__ bool key_kept(const FlashShape& s, std::int64_t b, int j) {
  return j < s.T && (s.key_mask == nullptr || s.key_mask[b * s.T + j] != 0);
}

// Whether query i of sample b attends key j (the masks of ops/attention.h).
__device__ __forceinline__ bool attends(const FlashShape& s, std::int64_t b, int i, int j) {
  return key_kept(s, b, j) && (!s.causal || j <= i);
}

// How many tiles of `tile` keys the queries [i0, i0 + rows) look at: causal attention ends at
// the diagonal, so the tiles wholly above it are never visited.
__host__ __device__ __forceinline__ int key_tiles_for(const FlashShape& s, int i0, int rows, int tile) {
  const int end = s.causal && i0 + rows < s.T ? i0 + rows : s.T;
  return (end + tile - 1) / tile;
}

// The first tile of `tile` queries that attends any key at or after j0 (causal: queries i >= j0).
__host__ __device__ __forceinline__ int first_query_tile(const FlashShape& s, int j0, int tile) {
  return s.causal ? j0 / tile : 0;
}

__host__ __device__ __forceinline__ int tiles_of(int n, int tile) { return (n + tile - 1) / tile; }

// A block's (sample, head) pair bh = b H + h and its tile. Blocks are numbered tile-major, so the
// first wave holds every pair's costliest tiles: with causal attention a query tile's work grows
// with its index and a key tile's shrinks (`longest_last` says which).
struct BlockTile {
  std::int64_t bh;
  int tile;
};
__device__ __forceinline__ BlockTile block_tile(std::int64_t pairs, int tiles, bool longest_last) {
  const int rank = int(blockIdx.x / pairs);
  return BlockTile{std::int64_t(blockIdx.x) % pairs, longest_last ? tiles - 1 - rank : rank};
}

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kRowDotThreads = 256;

// ---- kernels ----

// delta[b, h, i] = dy_i . y_i over the head's columns: FlashAttention-2's D_i, the row term of
// the softmax backward (sum_j p_ij dp_ij = dO_i . O_i), from y as stored. A warp per row: lanes
// stride the head dims, then a fixed-shape warp sum (deterministic).
template <class T>
__global__ void __launch_bounds__(kRowDotThreads)
    flash_row_dot_kernel(float* __restrict__ delta, const T* __restrict__ dy, const T* __restrict__ y, FlashShape s,
                         std::int64_t rows) {
  const int lane = threadIdx.x % 32;
  const std::int64_t warps = std::int64_t(gridDim.x) * (blockDim.x / 32);
  for (std::int64_t r = std::int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; r < rows; r += warps) {
    const std::int64_t i = r % s.T, bh = r / s.T;  // r = (b H + h) T + i
    const std::int64_t offset = out_row(s, bh / s.H, i) + (bh % s.H) * s.hd;
    float acc = 0.0f;
    for (int d = lane; d < s.hd; d += 32) acc = fmaf(load(dy[offset + d]), load(y[offset + d]), acc);
    acc = warp_sum(acc);
    if (lane == 0) delta[r] = acc;
  }
}

}  // namespace
}  // namespace tidal::ops::cuda
