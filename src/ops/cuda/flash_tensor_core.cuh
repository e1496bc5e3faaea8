// Flash attention on tensor cores for bf16 / fp16 storage and head widths that are a multiple of
// 16 up to 128 (ops/cuda/attention.cu builds 64 and 128): FlashAttention-2's kernels with
// mma.sync m16n8k16 (ops/cuda/flash_device.cuh has the fragment layouts).
//
// A block is 4 warps over 64 rows (queries in forward and dQ, keys in dK / dV), 16 rows a warp;
// the other side streams through shared memory in tiles of 64, double-buffered with cp.async so
// the next tile loads while this one is multiplied. With grouped-query heads the dK / dV block
// of a kv head streams the query tiles of each of its query heads in turn (query_step), its
// accumulators running on across heads. Every product accumulates in fp32. As in
// FlashAttention, the probabilities P are rounded to the storage type before P V (forward) and
// P^T dO (dV), and the score gradients dS before dS K (dQ) and dS^T Q (dK); the softmax
// statistics, lse and D stay fp32. Rows past the sequence are zero-filled in shared memory and
// never stored.
//
// Shared-memory rows have a pitch of hd + 8 elements: 16 bytes more than a row, so the 8 rows an
// ldmatrix reads start in 8 different 16-byte bank groups (no conflicts), and every row start
// stays 16-byte aligned for cp.async.
//
// Determinism: each output element is accumulated by one thread in a fixed order (the tiles in
// order, the mma's k in order); row statistics are combined by fixed xor shuffles. No atomics.
#pragma once

#include "ops/cuda/flash_common.cuh"
#include "ops/cuda/flash_device.cuh"

#include <cstring>

namespace tidal::ops::cuda {
namespace {

constexpr int kTcRows = 64;  // rows per block and per streamed tile
constexpr int kTcWarps = 4;  // 16 rows each
constexpr int kTcThreads = 32 * kTcWarps;

template <int kHd>
struct TcTiles {
  static_assert(kHd % 16 == 0 && kHd <= 128, "tensor-core attention: head width a multiple of 16, at most 128");
  static constexpr int kPitch = kHd + 8;                 // elements per shared-memory row
  static constexpr int kTileElems = kTcRows * kPitch;    // one [64][kPitch] tile
  static constexpr int kPieces = kHd / 8;                // 16-byte pieces per row
  // Backward's inner step along the streamed tile: 64 for hd <= 64, 32 above, so the score and
  // score-gradient accumulators (kStep / 2 floats each) fit in registers beside dK, dV or dQ.
  static constexpr int kStep = kHd <= 64 ? 64 : 32;
  // Dynamic shared memory: forward q + 2 k + 2 v tiles and 2 x 64 key tags; dK / dV k, v, 2 q,
  // 2 dO tiles and 2 x 64 lse, D and query document starts; dQ q, dO, 2 k, 2 v tiles and 2 x 64
  // key tags.
  static constexpr int kForwardBytes = 5 * kTileElems * 2 + 2 * kTcRows * 4;
  static constexpr int kKeyGradsBytes = 6 * kTileElems * 2 + 6 * kTcRows * 4;
  static constexpr int kQueryGradsBytes = 6 * kTileElems * 2 + 2 * kTcRows * 4;
};

// Issues the copies of rows [row0, row0 + 64) of one head's slice (row r at src + r ld) into a
// tile; rows at or past `seq` become zeros. The caller commits.
template <int kHd, class T>
__device__ __forceinline__ void load_tile_async(T* tile, const T* src, std::int64_t ld, int row0, int seq) {
  using Tiles = TcTiles<kHd>;
  for (int c = threadIdx.x; c < kTcRows * Tiles::kPieces; c += kTcThreads) {
    const int r = c / Tiles::kPieces, col = (c % Tiles::kPieces) * 8;
    const bool valid = row0 + r < seq;
    copy_async_16(tile + r * Tiles::kPitch + col, valid ? src + std::int64_t(row0 + r) * ld + col : src, valid);
  }
}

// A warp's A fragment of its 16 rows, columns [col, col + 16), of a tile.
template <int kHd, class T>
__device__ __forceinline__ void load_a(std::uint32_t (&a)[4], const T* tile, int row, int col, int lane) {
  load_matrix_x4<false>(a, tile + (row + lane % 16) * TcTiles<kHd>::kPitch + col + (lane / 16) * 8);
}

// B fragments for the products against a tile's rows: keys (or queries) [row, row + 16) as the
// n side and columns [col, col + 16) as k, i.e. B = tile^T: {b0, b1} of rows row.. row+7 in
// b[0], b[1] and of rows row+8 .. row+15 in b[2], b[3].
template <int kHd, class T>
__device__ __forceinline__ void load_b_rows(std::uint32_t (&b)[4], const T* tile, int row, int col, int lane) {
  load_matrix_x4<false>(b, tile + (row + (lane / 16) * 8 + lane % 8) * TcTiles<kHd>::kPitch + col + (lane / 8 % 2) * 8);
}

// B fragments with the tile's rows [row, row + 16) as k and columns [col, col + 16) as the n side
// (B = tile): {b0, b1} of columns col.. col+7 in b[0], b[1] and of col+8 .. col+15 in b[2], b[3].
template <int kHd, class T>
__device__ __forceinline__ void load_b_cols(std::uint32_t (&b)[4], const T* tile, int row, int col, int lane) {
  load_matrix_x4<true>(b, tile + (row + (lane / 8 % 2) * 8 + lane % 8) * TcTiles<kHd>::kPitch + col + (lane / 16) * 8);
}

// s += A B^T over the kHd columns, for A the warp's 16 rows [a_row, a_row + 16) of one tile and B
// the rows [b_row, b_row + kWidth) of another: the warp's 16 x kWidth block of row products (scores,
// or their gradients dP), as kWidth / 8 accumulator tiles.
template <int kHd, int kWidth, class T>
__device__ __forceinline__ void accumulate_row_products(float (&s)[kWidth / 8][4], const T* a_tile, int a_row,
                                                        const T* b_tile, int b_row, int lane) {
#pragma unroll
  for (int kk = 0; kk < kHd / 16; ++kk) {
    std::uint32_t a[4];
    load_a<kHd>(a, a_tile, a_row, kk * 16, lane);
#pragma unroll
    for (int np = 0; np < kWidth / 16; ++np) {
      std::uint32_t b[4];
      load_b_rows<kHd>(b, b_tile, b_row + np * 16, kk * 16, lane);
      mma_16x8x16<T>(s[2 * np], a, b[0], b[1]);
      mma_16x8x16<T>(s[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// acc += A B for A the warp's 16 x kWidth block held as accumulator tiles `c` (rounded to T here:
// probabilities or score gradients) and B the rows [row0, row0 + kWidth) of a tile, all kHd
// columns: the warp's 16 x kHd block of outputs (O, dV, dK or dQ).
template <int kHd, int kWidth, class T>
__device__ __forceinline__ void accumulate_times_tile(float (&acc)[kHd / 8][4], const float (&c)[kWidth / 8][4],
                                                      const T* tile, int row0, int lane) {
#pragma unroll
  for (int kk = 0; kk < kWidth / 16; ++kk) {
    std::uint32_t a[4];
    accumulators_as_a<T>(a, c[2 * kk], c[2 * kk + 1]);
#pragma unroll
    for (int dp = 0; dp < kHd / 16; ++dp) {
      std::uint32_t b[4];
      load_b_cols<kHd>(b, tile, row0 + kk * 16, dp * 16, lane);
      mma_16x8x16<T>(acc[2 * dp], a, b[0], b[1]);
      mma_16x8x16<T>(acc[2 * dp + 1], a, b[2], b[3]);
    }
  }
}

// One key tile's step of the online softmax for the thread's rows g (elements 0, 1 of each
// accumulator tile) and g + 8 (elements 2, 3): raw scores in `sc` become exp(scale (s - m)) for
// the row's running max m, the partial row sums (this thread's columns only) and the output so
// far are rescaled to the new max. A row's 64 scores are spread over the 4 threads of a quad,
// which exchange maxima by xor 1 and 2. A row with nothing attended yet keeps max -inf and uses 0
// as its reference, so no -inf - -inf appears.
template <int kHd>
__device__ __forceinline__ void online_softmax_step(float (&sc)[8][4], float (&row_max)[2], float (&row_sum)[2],
                                                    float (&o)[kHd / 8][4], float scale_log2) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float mx = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) mx = fmaxf(mx, fmaxf(sc[nt][2 * half], sc[nt][2 * half + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(row_max[half], mx);
    const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
    const float rescale = exp2f((row_max[half] - m_ref) * scale_log2);
    const float shift = m_ref * scale_log2;
    row_max[half] = m_new;
    float sum = 0.0f;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 2 * half; e < 2 * half + 2; ++e) {
        sc[nt][e] = exp2f(fmaf(sc[nt][e], scale_log2, -shift));
        sum += sc[nt][e];
      }
    row_sum[half] = fmaf(row_sum[half], rescale, sum);
#pragma unroll
    for (int n = 0; n < kHd / 8; ++n) {
      o[n][2 * half] *= rescale;
      o[n][2 * half + 1] *= rescale;
    }
  }
}

// acc[kHd / 8] (a warp's 16 x kHd block, rows g and g + 8 scaled by scale_lo and scale_hi) rounded
// into the warp's 16 rows of a tile; then the rows below `seq` to dst (row r at dst + r ld) in
// 16-byte pieces. Only this warp touches these rows, so a warp barrier orders the two steps.
template <int kHd, class T>
__device__ __forceinline__ void store_warp_rows(T* dst, std::int64_t ld, T* rows, const float (&acc)[kHd / 8][4],
                                                float scale_lo, float scale_hi, int row0, int seq, int lane) {
  using Tiles = TcTiles<kHd>;
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int n = 0; n < kHd / 8; ++n) {
    const std::uint32_t lo = pack_pair<T>(acc[n][0] * scale_lo, acc[n][1] * scale_lo);
    const std::uint32_t hi = pack_pair<T>(acc[n][2] * scale_hi, acc[n][3] * scale_hi);
    memcpy(static_cast<void*>(rows + g * Tiles::kPitch + n * 8 + 2 * t), &lo, sizeof lo);
    memcpy(static_cast<void*>(rows + (g + 8) * Tiles::kPitch + n * 8 + 2 * t), &hi, sizeof hi);
  }
  __syncwarp();
  for (int c = lane; c < 16 * Tiles::kPieces; c += 32) {
    const int r = c / Tiles::kPieces, col = (c % Tiles::kPieces) * 8;
    if (row0 + r < seq)
      *reinterpret_cast<uint4*>(dst + std::int64_t(row0 + r) * ld + col) =
          *reinterpret_cast<const uint4*>(rows + r * Tiles::kPitch + col);
  }
}

// ---- kernels ----

// The key loop of forward and dQ: the tile at key j0 has its keys and values in buffer `buf` of
// ks and vs. Starts the copies of the next tile's into the other buffer (when there is one),
// waits for this tile's, and returns this thread's key_tag of the next tile, which the caller
// stores after this tile's products so that its load's latency hides behind them.
template <int kHd, class T>
__device__ __forceinline__ int next_key_tile(T* ks, T* vs, const T* k, const T* v, std::int64_t ld,
                                             const FlashShape& s, std::int64_t b, int buf, int j0, bool next) {
  using Tiles = TcTiles<kHd>;
  int next_kept = -1;
  if (next) {
    load_tile_async<kHd>(ks + (buf ^ 1) * Tiles::kTileElems, k, ld, j0 + kTcRows, s.T);
    load_tile_async<kHd>(vs + (buf ^ 1) * Tiles::kTileElems, v, ld, j0 + kTcRows, s.T);
    copy_async_commit();
    if (threadIdx.x < kTcRows) next_kept = key_tag(s, b, j0 + kTcRows + threadIdx.x);
    copy_async_wait<1>();
  } else {
    copy_async_wait<0>();
  }
  __syncthreads();
  return next_kept;
}

// y and lse for one (64-query tile, sample, head) per block; warp w owns queries i0 + 16w ..
template <class T, int kHd>
__global__ void __launch_bounds__(kTcThreads)
    flash_forward_tc_kernel(T* __restrict__ y, float* __restrict__ lse, const T* __restrict__ qkv, FlashShape s,
                            std::int64_t pairs) {
  using Tiles = TcTiles<kHd>;
  T* qs = reinterpret_cast<T*>(flash_shared_memory());
  T* ks = qs + Tiles::kTileElems;      // [2] tiles
  T* vs = ks + 2 * Tiles::kTileElems;  // [2] tiles
  int* kept = reinterpret_cast<int*>(vs + 2 * Tiles::kTileElems);  // [2][64] key_tag of each key tile

  const BlockTile bt = block_tile(pairs, tiles_of(s.T, kTcRows), true);
  const std::int64_t b = bt.bh / s.H, h = bt.bh % s.H;
  const int i0 = bt.tile * kTcRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const T* sample = qkv + qkv_row(s, b, 0);
  const T* q = sample + query_col(s, h);
  const T* k = sample + key_col(s, kv_head_of(h, s.Hkv));
  const T* v = sample + value_col(s, kv_head_of(h, s.Hkv));
  const std::int64_t ld = s.ld;
  const TileRange key_tiles = key_tiles_for(s, b, i0, kTcRows, kTcRows);
  const int j_first = key_tiles.first * kTcRows;

  load_tile_async<kHd>(qs, q, ld, i0, s.T);
  load_tile_async<kHd>(ks, k, ld, j_first, s.T);
  load_tile_async<kHd>(vs, v, ld, j_first, s.T);
  copy_async_commit();
  if (threadIdx.x < kTcRows) kept[threadIdx.x] = key_tag(s, b, j_first + threadIdx.x);
  int row_doc[2];  // this thread's queries' (rows g, g + 8) document starts
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int i = i0 + warp * 16 + g + 8 * half;
    row_doc[half] = i < s.T ? doc_start(s, b, i) : 0;
  }

  std::uint32_t qa[kHd / 16][4];  // the warp's queries as A fragments, loaded once
  float o[kHd / 8][4] = {};  // unnormalised output rows g, g + 8
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  const float scale_log2 = s.scale * kLog2e;
  for (int n = key_tiles.first; n < key_tiles.end; ++n) {
    const int buf = (n - key_tiles.first) & 1, j0 = n * kTcRows;
    const bool prefetch = n + 1 < key_tiles.end;
    const int next_kept = next_key_tile<kHd>(ks, vs, k, v, ld, s, b, buf, j0, prefetch);
    if (n == key_tiles.first)
#pragma unroll
      for (int kk = 0; kk < kHd / 16; ++kk) load_a<kHd>(qa[kk], qs, warp * 16, kk * 16, lane);

    // scores = Q K^T for the warp's 16 queries x 64 keys (unscaled)
    const T* kt = ks + buf * Tiles::kTileElems;
    float sc[8][4] = {};
#pragma unroll
    for (int kk = 0; kk < kHd / 16; ++kk)
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        std::uint32_t kb[4];
        load_b_rows<kHd>(kb, kt, np * 16, kk * 16, lane);
        mma_16x8x16<T>(sc[2 * np], qa[kk], kb[0], kb[1]);
        mma_16x8x16<T>(sc[2 * np + 1], qa[kk], kb[2], kb[3]);
      }
    // Masks only where the tile needs them: past the sequence end, padding, documents, or across
    // the diagonal.
    if (j0 + kTcRows > s.T || s.key_mask != nullptr || s.doc_pos != nullptr || (s.causal && j0 + kTcRows - 1 > i0)) {
      const int* kt_kept = kept + buf * kTcRows;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int c = nt * 8 + 2 * t + e % 2, i = i0 + warp * 16 + g + 8 * (e / 2);
          if (kt_kept[c] != row_doc[e / 2] || (s.causal && j0 + c > i)) sc[nt][e] = -INFINITY;
        }
    }
    online_softmax_step<kHd>(sc, row_max, row_sum, o, scale_log2);
    // O += P V, P rounded to T
    accumulate_times_tile<kHd, kTcRows>(o, sc, vs + buf * Tiles::kTileElems, 0, lane);
    if (prefetch && threadIdx.x < kTcRows) kept[(buf ^ 1) * kTcRows + threadIdx.x] = next_kept;
    __syncthreads();  // everyone is done with buffer `buf` before the next prefetch refills it
  }

  float inv[2], row_lse[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float l = row_sum[half];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    inv[half] = l > 0.0f ? 1.0f / l : 0.0f;
    row_lse[half] = l > 0.0f ? row_max[half] * s.scale + logf(l) : INFINITY;
  }
  // The warp's rows of qs are free: only this warp read them, into qa.
  store_warp_rows<kHd>(y + out_row(s, b, 0) + out_col(s, h), s.C, qs + warp * 16 * Tiles::kPitch, o, inv[0], inv[1],
                       i0 + warp * 16, s.T, lane);
  if (t == 0)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int i = i0 + warp * 16 + g + 8 * half;
      if (i < s.T) lse[bt.bh * s.T + i] = row_lse[half];
    }
}

// dK and dV for one (64-key tile, sample, kv head) per block (`pairs` is B Hkv), over the query
// tiles of every query head that attend it; warp w owns keys j0 + 16w .. and computes the
// transposed products S^T = K Q^T, dP^T = V dO^T.
template <class T, int kHd>
__global__ void __launch_bounds__(kTcThreads)
    flash_key_grads_tc_kernel(T* __restrict__ dqkv, const T* __restrict__ qkv, const T* __restrict__ dy,
                              const float* __restrict__ lse, const float* __restrict__ delta, FlashShape s,
                              std::int64_t pairs) {
  using Tiles = TcTiles<kHd>;
  constexpr int kStep = Tiles::kStep;
  T* ks = reinterpret_cast<T*>(flash_shared_memory());
  T* vs = ks + Tiles::kTileElems;
  T* qs = vs + Tiles::kTileElems;      // [2] tiles
  T* gs = qs + 2 * Tiles::kTileElems;  // [2] tiles of dO
  float* lse_s = reinterpret_cast<float*>(gs + 2 * Tiles::kTileElems);  // [2][64] lse * log2(e)
  float* delta_s = lse_s + 2 * kTcRows;                                  // [2][64]
  int* doc_s = reinterpret_cast<int*>(delta_s + 2 * kTcRows);            // [2][64] query document starts

  const int tiles = tiles_of(s.T, kTcRows);
  const BlockTile bt = block_tile(pairs, tiles, false);
  const std::int64_t b = bt.bh / s.Hkv, kv = bt.bh % s.Hkv;
  const int j0 = bt.tile * kTcRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const T* sample = qkv + qkv_row(s, b, 0);
  const std::int64_t ld = s.ld;
  const TileRange query_tiles = query_tiles_for(s, b, j0, kTcRows, kTcRows);
  const int first = query_tiles.first, per_head = query_tiles.end - first, count = per_head * (s.H / s.Hkv);

  const QueryStep<T> step0 = query_step(s, qkv, dy, lse, delta, b, kv, first, per_head, 0, kTcRows);
  load_tile_async<kHd>(ks, sample + key_col(s, kv), ld, j0, s.T);
  load_tile_async<kHd>(vs, sample + value_col(s, kv), ld, j0, s.T);
  load_tile_async<kHd>(qs, step0.q, ld, step0.i0, s.T);
  load_tile_async<kHd>(gs, step0.dout, s.C, step0.i0, s.T);
  copy_async_commit();
  // A query past the sequence gets lse = +inf, so its probabilities are 0.
  if (threadIdx.x < kTcRows) {
    const int i = step0.i0 + threadIdx.x;
    lse_s[threadIdx.x] = i < s.T ? step0.lse[i] * kLog2e : INFINITY;
    delta_s[threadIdx.x] = i < s.T ? step0.delta[i] : 0.0f;
    doc_s[threadIdx.x] = i < s.T ? doc_start(s, b, i) : 0;
  }
  int kept[2];  // this thread's keys' (rows g, g + 8) key_tag
#pragma unroll
  for (int half = 0; half < 2; ++half) kept[half] = key_tag(s, b, j0 + warp * 16 + g + 8 * half);

  float dk[kHd / 8][4] = {}, dv[kHd / 8][4] = {};
  const float scale_log2 = s.scale * kLog2e;
  for (int m = 0; m < count; ++m) {
    const int buf = m & 1, i0 = (first + m % per_head) * kTcRows;
    const bool prefetch = m + 1 < count;
    float next_lse = INFINITY, next_delta = 0.0f;
    int next_doc = 0;
    if (prefetch) {
      // The next step: the next query tile of this head, or the first of the group's next head.
      const QueryStep<T> next = query_step(s, qkv, dy, lse, delta, b, kv, first, per_head, m + 1, kTcRows);
      load_tile_async<kHd>(qs + (buf ^ 1) * Tiles::kTileElems, next.q, ld, next.i0, s.T);
      load_tile_async<kHd>(gs + (buf ^ 1) * Tiles::kTileElems, next.dout, s.C, next.i0, s.T);
      copy_async_commit();
      const int i = next.i0 + int(threadIdx.x);
      if (threadIdx.x < kTcRows && i < s.T) {
        next_lse = next.lse[i] * kLog2e;
        next_delta = next.delta[i];
        next_doc = doc_start(s, b, i);
      }
      copy_async_wait<1>();
    } else {
      copy_async_wait<0>();
    }
    __syncthreads();
    const T* qt = qs + buf * Tiles::kTileElems;
    const T* gt = gs + buf * Tiles::kTileElems;
    const float* lse_t = lse_s + buf * kTcRows;
    const float* delta_t = delta_s + buf * kTcRows;
    const int* doc_t = doc_s + buf * kTcRows;
    const bool diagonal = s.causal && j0 + kTcRows - 1 > i0;  // some key of the tile follows some query

    for (int q0 = 0; q0 < kTcRows; q0 += kStep) {
      // S^T = K Q^T and dP^T = V dO^T for the warp's 16 keys x kStep queries
      float st[kStep / 8][4] = {}, dpt[kStep / 8][4] = {};
      accumulate_row_products<kHd, kStep>(st, ks, warp * 16, qt, q0, lane);
      accumulate_row_products<kHd, kStep>(dpt, vs, warp * 16, gt, q0, lane);
      // P^T and dS^T = P^T (dP^T - D) in place; element e of tile nt is key g + 8 (e / 2), query
      // q0 + 8 nt + 2t + e % 2.
#pragma unroll
      for (int nt = 0; nt < kStep / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int c = q0 + nt * 8 + 2 * t + e % 2, j = j0 + warp * 16 + g + 8 * (e / 2);
          const bool visible = kept[e / 2] == doc_t[c] && !(diagonal && j > i0 + c);
          const float p = visible ? exp2f(fmaf(st[nt][e], scale_log2, -lse_t[c])) : 0.0f;
          st[nt][e] = p;
          dpt[nt][e] = p * (dpt[nt][e] - delta_t[c]);
        }
      // dV += P^T dO ; dK += dS^T Q (scaled on store)
      accumulate_times_tile<kHd, kStep>(dv, st, gt, q0, lane);
      accumulate_times_tile<kHd, kStep>(dk, dpt, qt, q0, lane);
    }
    if (prefetch && threadIdx.x < kTcRows) {
      lse_s[(buf ^ 1) * kTcRows + threadIdx.x] = next_lse;
      delta_s[(buf ^ 1) * kTcRows + threadIdx.x] = next_delta;
      doc_s[(buf ^ 1) * kTcRows + threadIdx.x] = next_doc;
    }
    __syncthreads();  // everyone is done with buffer `buf` before the next prefetch refills it
  }

  // The warp's rows of ks and vs are free: only this warp read them.
  T* dk_out = dqkv + qkv_row(s, b, 0) + key_col(s, kv);
  T* dv_out = dqkv + qkv_row(s, b, 0) + value_col(s, kv);
  store_warp_rows<kHd>(dk_out, ld, ks + warp * 16 * Tiles::kPitch, dk, s.scale, s.scale, j0 + warp * 16, s.T, lane);
  store_warp_rows<kHd>(dv_out, ld, vs + warp * 16 * Tiles::kPitch, dv, 1.0f, 1.0f, j0 + warp * 16, s.T, lane);
}

// dQ for one (64-query tile, sample, head) per block, over the key tiles it attends; warp w owns
// queries i0 + 16w ..
template <class T, int kHd>
__global__ void __launch_bounds__(kTcThreads)
    flash_query_grads_tc_kernel(T* __restrict__ dqkv, const T* __restrict__ qkv, const T* __restrict__ dy,
                                const float* __restrict__ lse, const float* __restrict__ delta, FlashShape s,
                                std::int64_t pairs) {
  using Tiles = TcTiles<kHd>;
  constexpr int kStep = Tiles::kStep;
  T* qs = reinterpret_cast<T*>(flash_shared_memory());
  T* gs = qs + Tiles::kTileElems;      // dO
  T* ks = gs + Tiles::kTileElems;      // [2] tiles
  T* vs = ks + 2 * Tiles::kTileElems;  // [2] tiles
  int* kept = reinterpret_cast<int*>(vs + 2 * Tiles::kTileElems);  // [2][64] key_tag of each key tile

  const BlockTile bt = block_tile(pairs, tiles_of(s.T, kTcRows), true);
  const std::int64_t b = bt.bh / s.H, h = bt.bh % s.H;
  const int i0 = bt.tile * kTcRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const T* sample = qkv + qkv_row(s, b, 0);
  const T* q = sample + query_col(s, h);
  const T* k = sample + key_col(s, kv_head_of(h, s.Hkv));
  const T* v = sample + value_col(s, kv_head_of(h, s.Hkv));
  const std::int64_t ld = s.ld;
  const TileRange key_tiles = key_tiles_for(s, b, i0, kTcRows, kTcRows);
  const int j_first = key_tiles.first * kTcRows;

  load_tile_async<kHd>(qs, q, ld, i0, s.T);
  load_tile_async<kHd>(gs, dy + out_row(s, b, 0) + out_col(s, h), s.C, i0, s.T);
  load_tile_async<kHd>(ks, k, ld, j_first, s.T);
  load_tile_async<kHd>(vs, v, ld, j_first, s.T);
  copy_async_commit();
  if (threadIdx.x < kTcRows) kept[threadIdx.x] = key_tag(s, b, j_first + threadIdx.x);
  // This thread's queries (rows g, g + 8): lse * log2(e), D and document start; past the
  // sequence, p = 0.
  float row_lse[2], row_delta[2];
  int row_doc[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int i = i0 + warp * 16 + g + 8 * half;
    row_lse[half] = i < s.T ? lse[bt.bh * s.T + i] * kLog2e : INFINITY;
    row_delta[half] = i < s.T ? delta[bt.bh * s.T + i] : 0.0f;
    row_doc[half] = i < s.T ? doc_start(s, b, i) : 0;
  }

  float dq[kHd / 8][4] = {};
  const float scale_log2 = s.scale * kLog2e;
  for (int n = key_tiles.first; n < key_tiles.end; ++n) {
    const int buf = (n - key_tiles.first) & 1, j0 = n * kTcRows;
    const bool prefetch = n + 1 < key_tiles.end;
    const int next_kept = next_key_tile<kHd>(ks, vs, k, v, ld, s, b, buf, j0, prefetch);
    const T* kt = ks + buf * Tiles::kTileElems;
    const int* kt_kept = kept + buf * kTcRows;
    // Keys past the sequence are masked too: their zero rows give p = exp(-lse), harmless times a
    // zero k row unless it overflows to inf (and inf * 0 is NaN).
    const bool masked = j0 + kTcRows > s.T || s.key_mask != nullptr || s.doc_pos != nullptr ||
                        (s.causal && j0 + kTcRows - 1 > i0);

    for (int k0 = 0; k0 < kTcRows; k0 += kStep) {
      // S = Q K^T and dP = dO V^T for the warp's 16 queries x kStep keys
      float sc[kStep / 8][4] = {}, dp[kStep / 8][4] = {};
      accumulate_row_products<kHd, kStep>(sc, qs, warp * 16, kt, k0, lane);
      accumulate_row_products<kHd, kStep>(dp, gs, warp * 16, vs + buf * Tiles::kTileElems, k0, lane);
      // dS = P (dP - D) in place; element e of tile nt is query g + 8 (e / 2), key k0 + 8 nt + 2t + e % 2.
#pragma unroll
      for (int nt = 0; nt < kStep / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int c = k0 + nt * 8 + 2 * t + e % 2, i = i0 + warp * 16 + g + 8 * (e / 2);
          const bool visible = !masked || (kt_kept[c] == row_doc[e / 2] && !(s.causal && j0 + c > i));
          const float p = visible ? exp2f(fmaf(sc[nt][e], scale_log2, -row_lse[e / 2])) : 0.0f;
          dp[nt][e] = p * (dp[nt][e] - row_delta[e / 2]);
        }
      // dQ += dS K (scaled on store)
      accumulate_times_tile<kHd, kStep>(dq, dp, kt, k0, lane);
    }
    if (prefetch && threadIdx.x < kTcRows) kept[(buf ^ 1) * kTcRows + threadIdx.x] = next_kept;
    __syncthreads();  // everyone is done with buffer `buf` before the next prefetch refills it
  }

  // The warp's rows of qs are free: only this warp read them.
  store_warp_rows<kHd>(dqkv + qkv_row(s, b, 0) + query_col(s, h), ld, qs + warp * 16 * Tiles::kPitch, dq, s.scale,
                       s.scale, i0 + warp * 16, s.T, lane);
}

}  // namespace
}  // namespace tidal::ops::cuda
