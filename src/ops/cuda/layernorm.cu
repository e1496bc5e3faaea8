// LayerNorm on the GPU (ops/layernorm.h). Forward: a warp per row, the mean and then the centred
// variance in two passes, the same formula as the CPU backend, so mean and rstd agree with it up
// to summation order. Backward: dx a warp per row; dw and db are column sums over the rows,
// taken without atomics in two fixed-order steps (each chunk of rows sums into its own partial
// row, then one thread per column adds the partials in chunk order), so they are bitwise
// reproducible from run to run.
#include "ops/layernorm.h"

#include "core/gpu.h"
#include "ops/cuda/common.cuh"

#include <algorithm>

namespace tidal::ops::cuda {
namespace {

constexpr int kRowThreads = 256;
constexpr int kColumnThreads = 128;
// dw/db: their partials by common.cuh's row_chunks (the summation order fixed by the shape).

// ---- kernels ----

// A warp per row, V elements an access (C a multiple of V, or V = 1). Each pass reads the row
// again; its 2C bytes (bf16) stay in L1 between passes.
constexpr int kRowWarps = kRowThreads / 32;

// x, y: [N, C]; w, b: [C]; mean, rstd: [N].
template <int V, class T>
__global__ void layernorm_forward_kernel(T* y, float* __restrict__ mean, float* __restrict__ rstd, const T* x,
                                         const T* __restrict__ w, const T* __restrict__ b, float eps, std::int64_t N,
                                         std::int64_t C) {
  const int lane = threadIdx.x % 32;
  for (std::int64_t n = blockIdx.x * std::int64_t(kRowWarps) + threadIdx.x / 32; n < N;
       n += std::int64_t(gridDim.x) * kRowWarps) {
    const T* xr = x + n * C;
    float sum = 0.0f;
    for (std::int64_t c = lane * V; c < C; c += 32 * V) {
      const Pack<V, T> xp = load_pack<V>(xr + c);
#pragma unroll
      for (int e = 0; e < V; ++e) sum += load(xp.v[e]);
    }
    const float mu = warp_sum(sum) / float(C);
    float var = 0.0f;
    for (std::int64_t c = lane * V; c < C; c += 32 * V) {
      const Pack<V, T> xp = load_pack<V>(xr + c);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float d = load(xp.v[e]) - mu;
        var += d * d;
      }
    }
    const float rs = 1.0f / sqrtf(warp_sum(var) / float(C) + eps);
    T* yr = y + n * C;
    for (std::int64_t c = lane * V; c < C; c += 32 * V) {
      const Pack<V, T> xp = load_pack<V>(xr + c), wp = load_pack<V>(w + c), bp = load_pack<V>(b + c);
      Pack<V, T> yp;
#pragma unroll
      for (int e = 0; e < V; ++e) yp.v[e] = store<T>((load(xp.v[e]) - mu) * rs * load(wp.v[e]) + load(bp.v[e]));
      store_pack<V>(yr + c, yp);
    }
    if (lane == 0) {
      mean[n] = mu;
      rstd[n] = rs;
    }
  }
}

// dx may alias dy or x (each element is read before its own thread writes it): no __restrict__.
template <int V, class T>
__global__ void layernorm_backward_dx_kernel(T* dx, const T* dy, const T* x, const T* __restrict__ w,
                                             const float* __restrict__ mean, const float* __restrict__ rstd,
                                             std::int64_t N, std::int64_t C) {
  const int lane = threadIdx.x % 32;
  for (std::int64_t n = blockIdx.x * std::int64_t(kRowWarps) + threadIdx.x / 32; n < N;
       n += std::int64_t(gridDim.x) * kRowWarps) {
    const T* xr = x + n * C;
    const T* dyr = dy + n * C;
    const float mu = mean[n], rs = rstd[n];
    float sum_g = 0.0f, sum_gx = 0.0f;  // sums of g = dy*w and g * xhat
    for (std::int64_t c = lane * V; c < C; c += 32 * V) {
      const Pack<V, T> xp = load_pack<V>(xr + c), gp = load_pack<V>(dyr + c), wp = load_pack<V>(w + c);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float xhat = (load(xp.v[e]) - mu) * rs;
        const float g = load(gp.v[e]) * load(wp.v[e]);
        sum_g += g;
        sum_gx += g * xhat;
      }
    }
    const float mg = warp_sum(sum_g) / float(C);
    const float mgx = warp_sum(sum_gx) / float(C);
    T* dxr = dx + n * C;
    for (std::int64_t c = lane * V; c < C; c += 32 * V) {
      const Pack<V, T> xp = load_pack<V>(xr + c), gp = load_pack<V>(dyr + c), wp = load_pack<V>(w + c);
      Pack<V, T> dp;
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float xhat = (load(xp.v[e]) - mu) * rs;
        dp.v[e] = store<T>((load(gp.v[e]) * load(wp.v[e]) - mg - xhat * mgx) * rs);
      }
      store_pack<V>(dxr + c, dp);
    }
  }
}

// partial [chunks, 2, C]: chunk p (blockIdx.y) sums dy * xhat (for dw) and dy (for db) over its
// rows [p * rows_per_chunk, ...) in row order, one thread per column.
template <class T>
__global__ void layernorm_backward_partial_kernel(float* __restrict__ partial, const T* __restrict__ dy,
                                                  const T* __restrict__ x, const float* __restrict__ mean,
                                                  const float* __restrict__ rstd, std::int64_t N, std::int64_t C,
                                                  std::int64_t rows_per_chunk) {
  const std::int64_t c = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  const std::int64_t p = blockIdx.y;
  const std::int64_t begin = p * rows_per_chunk, end = min(N, begin + rows_per_chunk);
  float sw = 0.0f, sb = 0.0f;
  for (std::int64_t n = begin; n < end; ++n) {
    const float d = load(dy[n * C + c]);
    const float xhat = (load(x[n * C + c]) - mean[n]) * rstd[n];
    sw += d * xhat;
    sb += d;
  }
  partial[(2 * p) * C + c] = sw;
  partial[(2 * p + 1) * C + c] = sb;
}

// dw, db [C] += the partials summed in chunk order, in fp32, rounded to T once (as the CPU does).
template <class T>
__global__ void layernorm_backward_reduce_kernel(T* __restrict__ dw, T* __restrict__ db,
                                                 const float* __restrict__ partial, std::int64_t chunks,
                                                 std::int64_t C) {
  TIDAL_CUDA_FOR(c, C) {
    float sw = load(dw[c]), sb = load(db[c]);
    for (std::int64_t p = 0; p < chunks; ++p) {
      sw += partial[(2 * p) * C + c];
      sb += partial[(2 * p + 1) * C + c];
    }
    dw[c] = store<T>(sw);
    db[c] = store<T>(sb);
  }
}

}  // namespace

// ---- launchers ----

void layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& w, const Tensor& b,
                       float eps) {
  expect_cuda_contiguous({&y, &mean, &rstd, &x, &w, &b}, "layernorm_forward operand");
  expect_same(y, x, "layernorm_forward y/x");
  if (x.numel() == 0) return;
  const std::int64_t C = x.dim(-1), N = rows_of(x);
  TIDAL_ASSERT(w.numel() == C && b.numel() == C && mean.numel() == N && rstd.numel() == N,
               "layernorm_forward shapes x {} w {} mean {}", x.str(), w.str(), mean.str());
  TIDAL_ASSERT(w.dtype() == x.dtype() && b.dtype() == x.dtype() && mean.dtype() == DType::f32 &&
                   rstd.dtype() == DType::f32,
               "layernorm_forward dtypes x {} w {} b {} mean {} rstd {}", x.str(), w.str(), b.str(), mean.str(),
               rstd.str());
  with_float_type(x.dtype(), [&]<class T>() {
    constexpr int V = kPackOf<T>;
    const unsigned blocks = blocks_for(N, kRowWarps);
    if (rows_in_packs<V>(C, ptr<T>(y), ptr<T>(x), ptr<T>(w), ptr<T>(b)))
      layernorm_forward_kernel<V, T><<<blocks, kRowThreads, 0, compute_stream()>>>(
          ptr<T>(y), ptr<float>(mean), ptr<float>(rstd), ptr<T>(x), ptr<T>(w), ptr<T>(b), eps, N, C);
    else
      layernorm_forward_kernel<1, T><<<blocks, kRowThreads, 0, compute_stream()>>>(
          ptr<T>(y), ptr<float>(mean), ptr<float>(rstd), ptr<T>(x), ptr<T>(w), ptr<T>(b), eps, N, C);
  });
  TIDAL_CUDA_CHECK_LAUNCH("layernorm_forward_kernel");
}

void layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& w,
                        const Tensor& mean, const Tensor& rstd) {
  expect_cuda_contiguous({&dx, &dw, &db, &dy, &x, &w, &mean, &rstd}, "layernorm_backward operand");
  expect_same(dx, x, "layernorm_backward dx/x");
  expect_same(dy, x, "layernorm_backward dy/x");
  if (x.numel() == 0) return;
  const std::int64_t C = x.dim(-1), N = rows_of(x);
  TIDAL_ASSERT(w.numel() == C && dw.numel() == C && db.numel() == C && mean.numel() == N && rstd.numel() == N,
               "layernorm_backward shapes x {} w {} dw {} db {} mean {}", x.str(), w.str(), dw.str(), db.str(),
               mean.str());
  TIDAL_ASSERT(w.dtype() == x.dtype() && dw.dtype() == x.dtype() && db.dtype() == x.dtype() &&
                   mean.dtype() == DType::f32 && rstd.dtype() == DType::f32,
               "layernorm_backward dtypes x {} w {} dw {} db {} mean {}", x.str(), w.str(), dw.str(), db.str(),
               mean.str());
  const auto [chunks, rows_per_chunk] = row_chunks(N, 2 * C);
  Tensor partial = Tensor::empty({chunks, 2, C}, DType::f32, gpu_allocator());
  const cudaStream_t stream = compute_stream();
  // dw/db first: they read dy and x, which dx may overwrite (the CPU allows dx to alias either).
  with_float_type(x.dtype(), [&]<class T>() {
    const dim3 grid{unsigned((C + kColumnThreads - 1) / kColumnThreads), unsigned(chunks)};
    layernorm_backward_partial_kernel<T><<<grid, kColumnThreads, 0, stream>>>(
        ptr<float>(partial), ptr<T>(dy), ptr<T>(x), ptr<float>(mean), ptr<float>(rstd), N, C, rows_per_chunk);
    TIDAL_CUDA_CHECK_LAUNCH("layernorm_backward_partial_kernel");
    layernorm_backward_reduce_kernel<T><<<blocks_for(C, kColumnThreads), kColumnThreads, 0, stream>>>(
        ptr<T>(dw), ptr<T>(db), ptr<float>(partial), chunks, C);
    TIDAL_CUDA_CHECK_LAUNCH("layernorm_backward_reduce_kernel");
    constexpr int V = kPackOf<T>;
    const unsigned blocks = blocks_for(N, kRowWarps);
    if (rows_in_packs<V>(C, ptr<T>(dx), ptr<T>(dy), ptr<T>(x), ptr<T>(w)))
      layernorm_backward_dx_kernel<V, T><<<blocks, kRowThreads, 0, stream>>>(
          ptr<T>(dx), ptr<T>(dy), ptr<T>(x), ptr<T>(w), ptr<float>(mean), ptr<float>(rstd), N, C);
    else
      layernorm_backward_dx_kernel<1, T><<<blocks, kRowThreads, 0, stream>>>(
          ptr<T>(dx), ptr<T>(dy), ptr<T>(x), ptr<T>(w), ptr<float>(mean), ptr<float>(rstd), N, C);
    TIDAL_CUDA_CHECK_LAUNCH("layernorm_backward_dx_kernel");
  });
}

}  // namespace tidal::ops::cuda
