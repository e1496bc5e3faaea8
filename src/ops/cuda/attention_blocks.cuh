// The building blocks of the ring-attention pieces (ops/cuda/ring_attention.cu): a matrix
// product batched over (sample, head) pairs on strided row-major operands - a head's columns of
// q, k or v read in place with their leading dimension, a column block of the probabilities with
// leading dimension T - and the masked row softmax and its backward on the fp32 probabilities.
// (Whole-sequence attention is flash-style and has its own kernels: ops/cuda/flash_*.cuh.)
//
// Determinism: every output element is summed by exactly one thread in a fixed order (the
// reduction index ascending), and every row reduction is a block reduction of fixed shape; no
// atomics, so two runs give the same bits.
#pragma once

#include "ops/cuda/common.cuh"

#include <climits>
#include <cstdint>

namespace tidal::ops::cuda {
namespace {

// The (sample b, head h) matrix of a batch starts at data + b * batch + h * head; its row r
// starts `ld` elements after row r - 1, and its columns are contiguous.
template <class T>
struct HeadRows {
  T* data;
  std::int64_t batch;
  std::int64_t head;
  std::int64_t ld;
};

// The keys a probability row may attend: rows are (b, h, query i) in that order, `queries` per
// (b, h); query i sits at global position first_query + i.
struct KeyMask {
  const std::int32_t* padding;  // [B, keys] i32, 1 = real token, 0 = padding; null = none
  std::int64_t heads;
  std::int64_t queries;
  std::int64_t first_query;
  bool causal;
};

constexpr int kTile = 64;              // output rows and columns per block
constexpr int kDepth = 16;             // reduction slice staged in shared memory per step
constexpr int kMatmulThreads = 256;    // 16 x 16 threads, each owning 4 x 4 outputs strided by 16
constexpr int kPerThread = kTile / 16;

// ---- kernels ----

// C = alpha * op(A) op(B) (+ C when accumulating) for the (b, h) matrix of each block;
// op(A) is [M, K] (A stored [K, M] when kATrans), op(B) is [K, N] (B stored [N, K] when kBTrans).
// blockIdx.x = ((b * heads + h) * m_tiles + m tile) * n_tiles + n tile.
template <bool kATrans, bool kBTrans, class TA, class TB, class TC>
__global__ void __launch_bounds__(kMatmulThreads)
    head_matmul_kernel(HeadRows<const TA> a, HeadRows<const TB> b, HeadRows<TC> c, int heads, int M, int N, int K,
                       int m_tiles, int n_tiles, float alpha, bool accumulate) {
  // +1 column: the staging writes walk k fastest for a non-transposed A (and a transposed B),
  // which would otherwise hit one bank 16 times.
  __shared__ float as[kDepth][kTile + 1];  // as[k][m] = op(A)[m0 + m, k0 + k]
  __shared__ float bs[kDepth][kTile + 1];  // bs[k][n] = op(B)[k0 + k, n0 + n]
  const std::int64_t tiles = std::int64_t(m_tiles) * n_tiles;
  const std::int64_t pair = blockIdx.x / tiles, tile = blockIdx.x % tiles;
  const int m0 = int(tile / n_tiles) * kTile, n0 = int(tile % n_tiles) * kTile;
  const std::int64_t sample = pair / heads, head = pair % heads;
  const TA* pa = a.data + sample * a.batch + head * a.head;
  const TB* pb = b.data + sample * b.batch + head * b.head;
  TC* pc = c.data + sample * c.batch + head * c.head;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;

  float acc[kPerThread][kPerThread] = {};
  for (int k0 = 0; k0 < K; k0 += kDepth) {
    // Consecutive threads walk the operand's contiguous dimension so the global reads coalesce.
    for (int e = threadIdx.x; e < kTile * kDepth; e += kMatmulThreads) {
      const int mm = kATrans ? e % kTile : e / kDepth;
      const int kk = kATrans ? e / kTile : e % kDepth;
      const int m = m0 + mm, k = k0 + kk;
      float v = 0.0f;
      if (m < M && k < K) v = load(kATrans ? pa[std::int64_t(k) * a.ld + m] : pa[std::int64_t(m) * a.ld + k]);
      as[kk][mm] = v;
    }
    for (int e = threadIdx.x; e < kTile * kDepth; e += kMatmulThreads) {
      const int nn = kBTrans ? e / kDepth : e % kTile;
      const int kk = kBTrans ? e % kDepth : e / kTile;
      const int n = n0 + nn, k = k0 + kk;
      float v = 0.0f;
      if (n < N && k < K) v = load(kBTrans ? pb[std::int64_t(n) * b.ld + k] : pb[std::int64_t(k) * b.ld + n]);
      bs[kk][nn] = v;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kDepth; ++kk) {
      float av[kPerThread], bv[kPerThread];
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) {
        av[i] = as[kk][ty + 16 * i];
        bv[i] = bs[kk][tx + 16 * i];
      }
#pragma unroll
      for (int i = 0; i < kPerThread; ++i)
#pragma unroll
        for (int j = 0; j < kPerThread; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();  // the next step overwrites as / bs
  }

#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int m = m0 + ty + 16 * i;
    if (m >= M) continue;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int n = n0 + tx + 16 * j;
      if (n >= N) continue;
      TC* out = pc + std::int64_t(m) * c.ld + n;
      float v = alpha * acc[i][j];
      if (accumulate) v = load(*out) + v;
      *out = store<TC>(v);
    }
  }
}

// In place over rows of `keys` scores: softmax over the kept keys, 0 for the others, a row with
// none kept all zeros (ops/cpu/softmax_row.h). Masked entries are never read: a skipped ring
// block leaves them unwritten.
__global__ void masked_softmax_kernel(float* probs, std::int64_t rows, std::int64_t keys, KeyMask mask) {
  __shared__ float scratch[32];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const std::int64_t sample = r / mask.queries / mask.heads;
    const std::int64_t query = mask.first_query + r % mask.queries;
    const std::int64_t end = mask.causal ? (query + 1 < keys ? query + 1 : keys) : keys;  // keys j < end
    const std::int32_t* padding = mask.padding ? mask.padding + sample * keys : nullptr;
    float* row = probs + r * keys;

    float mx = -INFINITY;
    for (std::int64_t j = threadIdx.x; j < end; j += blockDim.x)
      if (!padding || padding[j] != 0) mx = fmaxf(mx, row[j]);
    mx = block_max(mx, scratch);
    if (mx == -INFINITY) {  // the same answer in every thread, so the block stays together
      for (std::int64_t j = threadIdx.x; j < keys; j += blockDim.x) row[j] = 0.0f;
      continue;
    }
    float sum = 0.0f;
    for (std::int64_t j = threadIdx.x; j < keys; j += blockDim.x) {
      const float e = j < end && (!padding || padding[j] != 0) ? expf(row[j] - mx) : 0.0f;
      row[j] = e;
      sum += e;
    }
    const float inv = 1.0f / block_sum(sum, scratch);
    for (std::int64_t j = threadIdx.x; j < keys; j += blockDim.x) row[j] *= inv;
  }
}

// In place over rows of n: grad holds dP and becomes dS = P * (dP - sum(dP * P)). Each element is
// read and written by the same thread, after the block's sum.
__global__ void softmax_backward_kernel(float* grad, const float* probs, std::int64_t rows, std::int64_t n) {
  __shared__ float scratch[32];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float* g = grad + r * n;
    const float* p = probs + r * n;
    float dot = 0.0f;
    for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) dot += g[j] * p[j];
    dot = block_sum(dot, scratch);
    for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) g[j] = p[j] * (g[j] - dot);
  }
}

// ---- launchers ----

// A block per row: a warp for short rows, more for long ones (fixed by the row length, so the
// reduction order is too).
inline int row_threads(std::int64_t n) { return n <= 64 ? 32 : n <= 1024 ? 128 : 256; }
inline unsigned row_blocks(std::int64_t rows) { return unsigned(rows < (1LL << 30) ? rows : (1LL << 30)); }

// C = alpha * op(A) op(B) (+ C when `accumulate`) for every (sample, head) pair.
template <bool kATrans, bool kBTrans, class TA, class TB, class TC>
void head_matmul(HeadRows<const TA> a, HeadRows<const TB> b, HeadRows<TC> c, std::int64_t samples, std::int64_t heads,
                 std::int64_t M, std::int64_t N, std::int64_t K, float alpha, bool accumulate) {
  if (samples * heads * M * N == 0) return;
  TIDAL_CHECK(M <= INT_MAX && N <= INT_MAX && K <= INT_MAX && heads <= INT_MAX,
              "attention product [{}, {}] x [{}, {}] is too large for the CUDA kernel", M, K, K, N);
  const std::int64_t m_tiles = (M + kTile - 1) / kTile, n_tiles = (N + kTile - 1) / kTile;
  const std::int64_t blocks = samples * heads * m_tiles * n_tiles;
  TIDAL_CHECK(blocks <= INT_MAX, "attention: {} (sample, head) pairs of {} x {} tiles exceed the CUDA grid",
              samples * heads, m_tiles, n_tiles);
  head_matmul_kernel<kATrans, kBTrans, TA, TB, TC><<<unsigned(blocks), kMatmulThreads, 0, compute_stream()>>>(
      a, b, c, int(heads), int(M), int(N), int(K), int(m_tiles), int(n_tiles), alpha, accumulate);
  TIDAL_CUDA_CHECK_LAUNCH("head_matmul_kernel");
}

// probs [rows, keys] fp32, in place.
inline void masked_softmax(float* probs, std::int64_t rows, std::int64_t keys, const KeyMask& mask) {
  if (rows == 0 || keys == 0) return;
  masked_softmax_kernel<<<row_blocks(rows), row_threads(keys), 0, compute_stream()>>>(probs, rows, keys, mask);
  TIDAL_CUDA_CHECK_LAUNCH("masked_softmax_kernel");
}

// grad and probs [rows, n] fp32; grad in place.
inline void softmax_backward(float* grad, const float* probs, std::int64_t rows, std::int64_t n) {
  if (rows == 0 || n == 0) return;
  softmax_backward_kernel<<<row_blocks(rows), row_threads(n), 0, compute_stream()>>>(grad, probs, rows, n);
  TIDAL_CUDA_CHECK_LAUNCH("softmax_backward_kernel");
}

}  // namespace
}  // namespace tidal::ops::cuda
