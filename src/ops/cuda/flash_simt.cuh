// Flash attention in fp32 on the CUDA cores: the path for every dtype and head width up to
// kSimtMaxHeadDim (ops/cuda/attention.cu sends fp32, odd head widths and unaligned tensors here).
// FlashAttention-2's schedule: forward runs a block per (query tile, sample, head) with an online
// softmax over key tiles and writes y and lse; backward recomputes the probabilities from lse,
// one kernel per (key tile, sample, kv head) summing dK and dV over the query tiles of every
// query head that shares the kv head (query_step), one per (query tile, sample, head) summing dQ
// over the key tiles (a second pass over P and dS in place of atomics). Operands are staged in
// shared memory as fp32; 16-bit storage is widened on load and y, dq, dk, dv rounded once on
// store, as on the CPU.
//
// Determinism: every output element and every row statistic is summed by one thread (or one
// warp's fixed-shape reduction) in a fixed order; no atomics.
#pragma once

#include "ops/cuda/flash_common.cuh"
#include "ops/cuda/flash_device.cuh"

namespace tidal::ops::cuda {
namespace {

constexpr int kSimtThreads = 128;
constexpr int kSimtWarps = kSimtThreads / 32;
constexpr int kSimtMaxHeadDim = 256;

// Queries and keys per tile, and each kernel's shared memory in floats (the carve-up order of
// each kernel is listed beside its count). Rows read across threads at a fixed head dim are
// padded to hd + 1 so consecutive keys fall in different banks.
struct SimtTiles {
  int tile;  // 32 up to head width 128, 16 above (the shared memory stays near 100 KiB at 256)
  int hd;

  __host__ __device__ explicit SimtTiles(int head_dim) : tile(head_dim <= 128 ? 32 : 16), hd(head_dim) {}
  __host__ __device__ int padded() const { return tile * (hd + 1); }  // [tile][hd + 1]
  __host__ __device__ int dense() const { return tile * hd; }         // [tile][hd]
  __host__ __device__ int square() const { return tile * (tile + 1); }  // [tile][tile + 1]
  // q, k (padded); v, o (dense); s (square); row max, row sum, rescale ([tile] each)
  __host__ __device__ int forward_floats() const { return 2 * padded() + 2 * dense() + square() + 3 * tile; }
  // k, v, q, dO (padded); dK, dV (dense); p, ds (square); lse, D ([tile] each)
  __host__ __device__ int key_grads_floats() const { return 4 * padded() + 2 * dense() + 2 * square() + 2 * tile; }
  // q, dO, k, v (padded); dQ (dense); ds (square); lse, D ([tile] each)
  __host__ __device__ int query_grads_floats() const { return 4 * padded() + dense() + square() + 2 * tile; }
};

// Rows [row0, row0 + tile) of one head's [T, hd] slice (row r at src + r * ld) into dst with
// pitch `pitch`, as fp32; rows past the sequence are zeros.
template <class T>
__device__ __forceinline__ void stage_rows(float* dst, int pitch, const T* src, std::int64_t ld, int row0,
                                           const SimtTiles& st, int seq) {
  for (int e = threadIdx.x; e < st.tile * st.hd; e += kSimtThreads) {
    const int r = e / st.hd, d = e % st.hd;
    dst[r * pitch + d] = row0 + r < seq ? load(src[std::int64_t(row0 + r) * ld + d]) : 0.0f;
  }
}

// p_ij = exp(s_ij - lse_i) where query i attends key j (else 0; an lse of +inf gives 0 too) and
// ds_ij = p_ij (dO_i . v_j - D_i), from the staged rows q_i, dO_i, k_j, v_j. s_ij is formed as in
// forward (the same products in the same order), so p_ij is forward's probability.
__device__ __forceinline__ float2 prob_and_score_grad(const float* q, const float* dout, const float* k,
                                                      const float* v, int hd, float scale, float lse, float delta,
                                                      bool attended) {
  float qk = 0.0f, gv = 0.0f;
  for (int d = 0; d < hd; ++d) {
    qk = fmaf(q[d], k[d], qk);
    gv = fmaf(dout[d], v[d], gv);
  }
  const float p = attended ? expf(qk * scale - lse) : 0.0f;
  return make_float2(p, p * (gv - delta));
}

// ---- kernels ----

// y [B, T, C] and lse [B, H, T] for one (query tile, sample, head) per block.
template <class T>
__global__ void __launch_bounds__(kSimtThreads)
    flash_forward_simt_kernel(T* __restrict__ y, float* __restrict__ lse, const T* __restrict__ qkv, FlashShape s,
                              std::int64_t pairs) {
  const SimtTiles st(s.hd);
  const int tile = st.tile, hd = s.hd, pad = hd + 1, sq = tile + 1;
  const BlockTile bt = block_tile(pairs, tiles_of(s.T, tile), true);
  const std::int64_t b = bt.bh / s.H, h = bt.bh % s.H;
  const int i0 = bt.tile * tile;
  float* qs = reinterpret_cast<float*>(flash_shared_memory());
  float* ks = qs + st.padded();
  float* vs = ks + st.padded();
  float* os = vs + st.dense();  // unnormalised output rows
  float* ss = os + st.dense();  // scores, then probabilities
  float* row_max = ss + st.square();
  float* row_sum = row_max + tile;
  float* row_rescale = row_sum + tile;

  const T* sample = qkv + qkv_row(s, b, 0);
  const T* q = sample + query_col(s, h);
  const T* k = sample + key_col(s, kv_head_of(h, s.Hkv));
  const T* v = sample + value_col(s, kv_head_of(h, s.Hkv));
  const std::int64_t ld = s.ld;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;

  stage_rows(qs, pad, q, ld, i0, st, s.T);
  for (int e = threadIdx.x; e < st.dense(); e += kSimtThreads) os[e] = 0.0f;
  for (int r = threadIdx.x; r < tile; r += kSimtThreads) {
    row_max[r] = -INFINITY;
    row_sum[r] = 0.0f;
  }
  const TileRange key_tiles = key_tiles_for(s, b, i0, tile, tile);
  for (int n = key_tiles.first; n < key_tiles.end; ++n) {
    const int j0 = n * tile;
    __syncthreads();  // the previous tile's readers of ks, vs and ss are done
    stage_rows(ks, pad, k, ld, j0, st, s.T);
    stage_rows(vs, hd, v, ld, j0, st, s.T);
    __syncthreads();
    for (int e = threadIdx.x; e < tile * tile; e += kSimtThreads) {
      const int r = e / tile, c = e % tile;
      float acc = 0.0f;
      for (int d = 0; d < hd; ++d) acc = fmaf(qs[r * pad + d], ks[c * pad + d], acc);
      ss[r * sq + c] = attends(s, b, i0 + r, j0 + c) ? acc * s.scale : -INFINITY;
    }
    __syncthreads();
    // Online softmax, a warp per row: the running max m and sum l, and the factor exp(m_old - m)
    // that rescales the row's output so far. A row that has attended nothing yet keeps m = -inf
    // and uses 0 as its reference, so no -inf - -inf appears.
    for (int r = warp; r < tile; r += kSimtWarps) {
      const float score = lane < tile ? ss[r * sq + lane] : -INFINITY;
      const float m_old = row_max[r], l_old = row_sum[r];
      const float m_new = fmaxf(m_old, warp_max(score));
      const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
      const float p = expf(score - m_ref);
      const float sum = warp_sum(p);
      if (lane < tile) ss[r * sq + lane] = p;
      // Every lane has read row_max[r] and row_sum[r] before lane 0 overwrites them: the shuffles
      // in between order this on today's GPUs, but only a warp barrier promises it (and
      // compute-sanitizer's racecheck reported the pair as a hazard on an H200).
      __syncwarp();
      if (lane == 0) {
        const float rescale = expf(m_old - m_ref);
        row_rescale[r] = rescale;
        row_sum[r] = rescale * l_old + sum;
        row_max[r] = m_new;
      }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < st.dense(); e += kSimtThreads) {
      const int r = e / hd, d = e % hd;
      float acc = 0.0f;
      for (int c = 0; c < tile; ++c) acc = fmaf(ss[r * sq + c], vs[c * hd + d], acc);
      os[e] = fmaf(row_rescale[r], os[e], acc);
    }
  }
  __syncthreads();
  T* out = y + out_row(s, b, 0) + out_col(s, h);
  for (int e = threadIdx.x; e < st.dense(); e += kSimtThreads) {
    const int r = e / hd, d = e % hd;
    if (i0 + r >= s.T) continue;
    const float l = row_sum[r];
    out[std::int64_t(i0 + r) * s.C + d] = store<T>(l > 0.0f ? os[e] / l : 0.0f);
  }
  for (int r = threadIdx.x; r < tile; r += kSimtThreads) {
    if (i0 + r >= s.T) continue;
    const float l = row_sum[r];
    lse[bt.bh * s.T + i0 + r] = l > 0.0f ? row_max[r] + logf(l) : INFINITY;
  }
}

// dK and dV rows of one (key tile, sample, kv head) per block, over every query tile of every
// query head that attends it (`pairs` is B Hkv).
template <class T>
__global__ void __launch_bounds__(kSimtThreads)
    flash_key_grads_simt_kernel(T* __restrict__ dqkv, const T* __restrict__ qkv, const T* __restrict__ dy,
                                const float* __restrict__ lse, const float* __restrict__ delta, FlashShape s,
                                std::int64_t pairs) {
  const SimtTiles st(s.hd);
  const int tile = st.tile, hd = s.hd, pad = hd + 1, sq = tile + 1;
  const int tiles = tiles_of(s.T, tile);
  const BlockTile bt = block_tile(pairs, tiles, false);
  const std::int64_t b = bt.bh / s.Hkv, g = bt.bh % s.Hkv;
  const int j0 = bt.tile * tile;
  float* ks = reinterpret_cast<float*>(flash_shared_memory());
  float* vs = ks + st.padded();
  float* qs = vs + st.padded();
  float* gs = qs + st.padded();  // dO rows
  float* dks = gs + st.padded();
  float* dvs = dks + st.dense();
  float* ps = dvs + st.dense();
  float* dss = ps + st.square();
  float* lse_s = dss + st.square();
  float* delta_s = lse_s + tile;

  const T* sample = qkv + qkv_row(s, b, 0);
  const std::int64_t ld = s.ld;
  const TileRange query_tiles = query_tiles_for(s, b, j0, tile, tile);
  const int first = query_tiles.first, per_head = query_tiles.end - first, steps = per_head * (s.H / s.Hkv);

  stage_rows(ks, pad, sample + key_col(s, g), ld, j0, st, s.T);
  stage_rows(vs, pad, sample + value_col(s, g), ld, j0, st, s.T);
  for (int e = threadIdx.x; e < st.dense(); e += kSimtThreads) dks[e] = dvs[e] = 0.0f;
  for (int m = 0; m < steps; ++m) {
    const QueryStep<T> step = query_step(s, qkv, dy, lse, delta, b, g, first, per_head, m, tile);
    const int i0 = step.i0;
    __syncthreads();  // the previous tile's readers of qs, gs, ps and dss are done
    stage_rows(qs, pad, step.q, ld, i0, st, s.T);
    stage_rows(gs, pad, step.dout, s.C, i0, st, s.T);
    for (int r = threadIdx.x; r < tile; r += kSimtThreads) {
      const bool in = i0 + r < s.T;
      lse_s[r] = in ? step.lse[i0 + r] : INFINITY;
      delta_s[r] = in ? step.delta[i0 + r] : 0.0f;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < tile * tile; e += kSimtThreads) {
      const int r = e / tile, c = e % tile;  // query r, key c
      const float2 pd = prob_and_score_grad(qs + r * pad, gs + r * pad, ks + c * pad, vs + c * pad, hd, s.scale,
                                            lse_s[r], delta_s[r], attends(s, b, i0 + r, j0 + c));
      ps[r * sq + c] = pd.x;
      dss[r * sq + c] = pd.y;
    }
    __syncthreads();
    // dV_c += sum_r p_rc dO_r ; dK_c += sum_r ds_rc q_r (scaled on store)
    for (int e = threadIdx.x; e < st.dense(); e += kSimtThreads) {
      const int c = e / hd, d = e % hd;
      float dv = 0.0f, dk = 0.0f;
      for (int r = 0; r < tile; ++r) {
        dv = fmaf(ps[r * sq + c], gs[r * pad + d], dv);
        dk = fmaf(dss[r * sq + c], qs[r * pad + d], dk);
      }
      dvs[e] += dv;
      dks[e] += dk;
    }
  }
  T* dk_out = dqkv + qkv_row(s, b, 0) + key_col(s, g);
  T* dv_out = dqkv + qkv_row(s, b, 0) + value_col(s, g);
  for (int e = threadIdx.x; e < st.dense(); e += kSimtThreads) {
    const int c = e / hd, d = e % hd;
    if (j0 + c >= s.T) continue;
    dk_out[std::int64_t(j0 + c) * ld + d] = store<T>(s.scale * dks[e]);
    dv_out[std::int64_t(j0 + c) * ld + d] = store<T>(dvs[e]);
  }
}

// dQ rows of one (query tile, sample, head) per block, over every key tile it attends.
template <class T>
__global__ void __launch_bounds__(kSimtThreads)
    flash_query_grads_simt_kernel(T* __restrict__ dqkv, const T* __restrict__ qkv, const T* __restrict__ dy,
                                  const float* __restrict__ lse, const float* __restrict__ delta, FlashShape s,
                                  std::int64_t pairs) {
  const SimtTiles st(s.hd);
  const int tile = st.tile, hd = s.hd, pad = hd + 1, sq = tile + 1;
  const BlockTile bt = block_tile(pairs, tiles_of(s.T, tile), true);
  const std::int64_t b = bt.bh / s.H, h = bt.bh % s.H;
  const int i0 = bt.tile * tile;
  float* qs = reinterpret_cast<float*>(flash_shared_memory());
  float* gs = qs + st.padded();
  float* ks = gs + st.padded();
  float* vs = ks + st.padded();
  float* dqs = vs + st.padded();
  float* dss = dqs + st.dense();
  float* lse_s = dss + st.square();
  float* delta_s = lse_s + tile;

  const T* sample = qkv + qkv_row(s, b, 0);
  const T* k = sample + key_col(s, kv_head_of(h, s.Hkv));
  const T* v = sample + value_col(s, kv_head_of(h, s.Hkv));
  const std::int64_t ld = s.ld;

  stage_rows(qs, pad, sample + query_col(s, h), ld, i0, st, s.T);
  stage_rows(gs, pad, dy + out_row(s, b, 0) + out_col(s, h), s.C, i0, st, s.T);
  for (int r = threadIdx.x; r < tile; r += kSimtThreads) {
    const bool in = i0 + r < s.T;
    lse_s[r] = in ? lse[bt.bh * s.T + i0 + r] : INFINITY;
    delta_s[r] = in ? delta[bt.bh * s.T + i0 + r] : 0.0f;
  }
  for (int e = threadIdx.x; e < st.dense(); e += kSimtThreads) dqs[e] = 0.0f;
  const TileRange key_tiles = key_tiles_for(s, b, i0, tile, tile);
  for (int n = key_tiles.first; n < key_tiles.end; ++n) {
    const int j0 = n * tile;
    __syncthreads();  // the previous tile's readers of ks, vs and dss are done
    stage_rows(ks, pad, k, ld, j0, st, s.T);
    stage_rows(vs, pad, v, ld, j0, st, s.T);
    __syncthreads();
    for (int e = threadIdx.x; e < tile * tile; e += kSimtThreads) {
      const int r = e / tile, c = e % tile;  // query r, key c
      dss[r * sq + c] = prob_and_score_grad(qs + r * pad, gs + r * pad, ks + c * pad, vs + c * pad, hd, s.scale,
                                            lse_s[r], delta_s[r], attends(s, b, i0 + r, j0 + c))
                            .y;
    }
    __syncthreads();
    // dQ_r += sum_c ds_rc k_c (scaled on store)
    for (int e = threadIdx.x; e < st.dense(); e += kSimtThreads) {
      const int r = e / hd, d = e % hd;
      float acc = 0.0f;
      for (int c = 0; c < tile; ++c) acc = fmaf(dss[r * sq + c], ks[c * pad + d], acc);
      dqs[e] += acc;
    }
  }
  T* dq_out = dqkv + qkv_row(s, b, 0) + query_col(s, h);
  for (int e = threadIdx.x; e < st.dense(); e += kSimtThreads) {
    const int r = e / hd, d = e % hd;
    if (i0 + r < s.T) dq_out[std::int64_t(i0 + r) * ld + d] = store<T>(s.scale * dqs[e]);
  }
}

}  // namespace
}  // namespace tidal::ops::cuda
