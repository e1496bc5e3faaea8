// What every flash-attention kernel shares (ops/cuda/flash_simt.cuh, the fp32 path for any dtype
// and head width; ops/cuda/flash_tensor_core.cuh, the bf16 / fp16 path): one call's shape and
// masks, which keys a query attends, the tiles causal attention visits, how a block finds its
// tile, and backward's row term D.
//
// The layout (ops/attention.h): a row of qkv [B, T, (H + 2 Hkv) hd] holds the H query heads, then
// the Hkv key heads, then the Hkv value heads, hd columns each; query head h attends with kv head
// kv_head_of(h, Hkv). y and dy are [B, T, C = H hd], query head h's columns at its output slot
// (output_head: grouped by kv head); lse and D are [B, H, T] fp32.
#pragma once

#include "ops/attention.h"
#include "ops/cuda/common.cuh"

#include <cstdint>

namespace tidal::ops::cuda {
namespace {

struct FlashShape {
  int T;                          // sequence length
  int H;                          // query heads
  int Hkv;                        // key / value heads (H is a multiple)
  int hd;                         // head width
  std::int64_t C;                 // H * hd: the width of y and of the query heads
  std::int64_t ld;                // (H + 2 Hkv) * hd: a row of qkv
  float scale;                    // 1 / sqrt(hd), applied to q . k
  bool causal;                    // query i attends keys j <= i
  const std::int32_t* key_mask;   // [B, T]: key j of sample b is never attended where 0; null = none
  const std::int32_t* doc_pos;    // [B, T]: positions in packed documents (ops/attention.h); null = none
};

// Element offset of row t of sample b in qkv [B, T, ld] and in y / dy [B, T, C].
__device__ __forceinline__ std::int64_t qkv_row(const FlashShape& s, std::int64_t b, std::int64_t t) {
  return (b * s.T + t) * s.ld;
}
__device__ __forceinline__ std::int64_t out_row(const FlashShape& s, std::int64_t b, std::int64_t t) {
  return (b * s.T + t) * s.C;
}

// Where query head h, and the keys and values of kv head g, start in a row of qkv (as
// AttentionDims::query_offset, key_offset, value_offset).
__device__ __forceinline__ std::int64_t query_col(const FlashShape& s, std::int64_t h) { return h * s.hd; }
__device__ __forceinline__ std::int64_t key_col(const FlashShape& s, std::int64_t g) { return s.C + g * s.hd; }
__device__ __forceinline__ std::int64_t value_col(const FlashShape& s, std::int64_t g) {
  return s.C + (s.Hkv + g) * s.hd;
}
// Where query head h's output starts in a row of y / dy (AttentionDims::output_offset).
__device__ __forceinline__ std::int64_t out_col(const FlashShape& s, std::int64_t h) {
  return output_head(h, s.H, s.Hkv) * s.hd;
}

// Sample b's documents (ops/attention.h: one without doc_pos).
__device__ __forceinline__ Documents documents(const FlashShape& s, std::int64_t b) {
  return {s.doc_pos ? s.doc_pos + b * s.T : nullptr, s.T};
}
// Where the document of token i of sample b starts (0 without documents).
__device__ __forceinline__ int doc_start(const FlashShape& s, std::int64_t b, int i) {
  return s.doc_pos ? int(documents(s, b).start(i)) : 0;
}

// Whether any query may attend key j of sample b: inside the sequence and not padding.
__device__ __forceinline__ bool key_kept(const FlashShape& s, std::int64_t b, int j) {
  return j < s.T && (s.key_mask == nullptr || s.key_mask[b * s.T + j] != 0);
}

// Key j of sample b as the tensor-core kernels keep it per tile: its document's start where a
// query may attend it, -1 where none may. Query i attends it where the tag equals doc_start(i)
// (and the causal mask allows).
__device__ __forceinline__ int key_tag(const FlashShape& s, std::int64_t b, int j) {
  return key_kept(s, b, j) ? doc_start(s, b, j) : -1;
}

// Whether query i of sample b attends key j (the masks of ops/attention.h).
__device__ __forceinline__ bool attends(const FlashShape& s, std::int64_t b, int i, int j) {
  return key_kept(s, b, j) && (!s.causal || j <= i) &&
         (s.doc_pos == nullptr || doc_start(s, b, i) == doc_start(s, b, j));
}

__host__ __device__ __forceinline__ int tiles_of(int n, int tile) { return (n + tile - 1) / tile; }

// Tiles [first, end) of `tile` rows.
struct TileRange {
  int first, end;
};

// The tiles of `tile` keys the queries [i0, i0 + rows) of sample b look at: from the first
// query's document to the last query's key under the causal mask (or its document's end), so
// the tiles wholly above the diagonal or outside the queries' documents are never visited.
__device__ __forceinline__ TileRange key_tiles_for(const FlashShape& s, std::int64_t b, int i0, int rows, int tile) {
  const int last = (i0 + rows < s.T ? i0 + rows : s.T) - 1;
  const int end = s.causal ? last + 1 : s.doc_pos ? int(documents(s, b).end(last)) : s.T;
  return {doc_start(s, b, i0) / tile, tiles_of(end, tile)};
}

// The tiles of `tile` queries that attend any key of [j0, j0 + rows) of sample b: from the first
// key (causal) or its document's start, to the last key's document's end.
__device__ __forceinline__ TileRange query_tiles_for(const FlashShape& s, std::int64_t b, int j0, int rows, int tile) {
  const int last = (j0 + rows < s.T ? j0 + rows : s.T) - 1;
  const int first = s.causal ? j0 : doc_start(s, b, j0);
  const int end = s.doc_pos ? int(documents(s, b).end(last)) : s.T;
  return {first / tile, tiles_of(end, tile)};
}

// A block's (sample, head) pair bh = b H + h (b Hkv + g for a kv head) and its tile. Blocks are
// numbered tile-major, so the first wave holds every pair's costliest tiles: with causal
// attention a query tile's work grows with its index and a key tile's shrinks (`longest_last`
// says which).
struct BlockTile {
  std::int64_t bh;
  int tile;
};
__device__ __forceinline__ BlockTile block_tile(std::int64_t pairs, int tiles, bool longest_last) {
  const int rank = int(blockIdx.x / pairs);
  return BlockTile{std::int64_t(blockIdx.x) % pairs, longest_last ? tiles - 1 - rank : rank};
}

// Step m of a key tile's backward (dK, dV) of kv head g: the group's H / Hkv query heads in the
// order of query_head_of, each over the query tiles [first, first + per_head) that may attend
// the key tile. Summing over the steps in order sums the group's heads in a fixed order
// (deterministic; in GQA, Ainslie et al. 2023, a kv head's gradient is the sum of its query
// heads').
template <class T>
struct QueryStep {
  const T* q;           // the head's queries: row 0 of the sample in qkv (leading dim s.ld)
  const T* dout;        // the head's dO: row 0 of the sample in dy (leading dim s.C)
  const float* lse;     // [T] of (b, h)
  const float* delta;   // [T] of (b, h)
  int i0;               // the tile's first query
};
template <class T>
__device__ __forceinline__ QueryStep<T> query_step(const FlashShape& s, const T* qkv, const T* dy, const float* lse,
                                                   const float* delta, std::int64_t b, std::int64_t g, int first,
                                                   int per_head, int m, int tile) {
  const std::int64_t h = query_head_of(g, m / per_head, s.Hkv), bh = b * s.H + h;
  return QueryStep<T>{qkv + qkv_row(s, b, 0) + query_col(s, h), dy + out_row(s, b, 0) + out_col(s, h), lse + bh * s.T,
                      delta + bh * s.T, (first + m % per_head) * tile};
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
    const std::int64_t offset = out_row(s, bh / s.H, i) + out_col(s, bh % s.H);
    float acc = 0.0f;
    for (int d = lane; d < s.hd; d += 32) acc = fmaf(load(dy[offset + d]), load(y[offset + d]), acc);
    acc = warp_sum(acc);
    if (lane == 0) delta[r] = acc;
  }
}

}  // namespace
}  // namespace tidal::ops::cuda
