// ViT's class token on the GPU: index-mapping kernels, one thread per output element. The copies
// move bits (as 16- or 32-bit words, whatever the dtype, like the CPU's memcpy); the token's
// gradient adds the batch in order, rounding to the storage type after each add as the CPU does,
// so every result is bitwise the CPU backend's.
#include "ops/class_token.h"

#include "ops/cuda/common.cuh"

namespace tidal::ops::cuda {
namespace {

constexpr int kThreads = 256;

// f.template operator()<W>() with W the unsigned word of the dtype's size: copies keep the bits.
template <class F>
void with_word_type(DType dtype, F&& f) {
  switch (dtype_size(dtype)) {
    case 2: f.template operator()<std::uint16_t>(); return;
    case 4: f.template operator()<std::uint32_t>(); return;
    default: break;
  }
  TIDAL_ASSERT(false, "class token op on {}", dtype_name(dtype));
}

// ---- kernels ----

// y [B, N+1, D]: row 0 of each sequence is the token [D], rows 1..N are x [B, N, D].
template <class W>
__global__ void prepend_token_kernel(W* __restrict__ y, const W* __restrict__ x, const W* __restrict__ token,
                                     std::int64_t N, std::int64_t D, std::int64_t total) {
  TIDAL_CUDA_FOR(i, total) {
    const std::int64_t d = i % D, row = i / D;  // row = b * (N + 1) + t
    const std::int64_t t = row % (N + 1), b = row / (N + 1);
    y[i] = t == 0 ? token[d] : x[(b * N + t - 1) * D + d];
  }
}

// dx [B, N, D] = dy [B, N+1, D] without row 0 of each sequence.
template <class W>
__global__ void drop_token_rows_kernel(W* __restrict__ dx, const W* __restrict__ dy, std::int64_t N, std::int64_t D,
                                       std::int64_t total) {
  TIDAL_CUDA_FOR(i, total) {
    const std::int64_t d = i % D, row = i / D;  // row = b * N + n
    const std::int64_t n = row % N, b = row / N;
    dx[i] = dy[(b * (N + 1) + n + 1) * D + d];
  }
}

// dtoken [D] += dy[b, 0] for b = 0 .. B-1 in order, rounding after each add (the CPU's loop).
template <class T>
__global__ void token_grad_kernel(T* __restrict__ dtoken, const T* __restrict__ dy, std::int64_t B, std::int64_t N,
                                  std::int64_t D) {
  TIDAL_CUDA_FOR(d, D) {
    T acc = dtoken[d];
    for (std::int64_t b = 0; b < B; ++b) acc = store<T>(load(acc) + load(dy[b * (N + 1) * D + d]));
    dtoken[d] = acc;
  }
}

// y [B, D] = x [B, T, D] at sequence position `index`.
template <class W>
__global__ void select_token_kernel(W* __restrict__ y, const W* __restrict__ x, std::int64_t T, std::int64_t D,
                                    std::int64_t index, std::int64_t total) {
  TIDAL_CUDA_FOR(i, total) {
    const std::int64_t d = i % D, b = i / D;
    y[i] = x[(b * T + index) * D + d];
  }
}

// dx [B, T, D] = dy [B, D] at position `index`, zero elsewhere (every element written).
template <class W>
__global__ void select_token_backward_kernel(W* __restrict__ dx, const W* __restrict__ dy, std::int64_t T,
                                             std::int64_t D, std::int64_t index, std::int64_t total) {
  TIDAL_CUDA_FOR(i, total) {
    const std::int64_t d = i % D, row = i / D;  // row = b * T + t
    const std::int64_t t = row % T, b = row / T;
    dx[i] = t == index ? dy[b * D + d] : W(0);
  }
}

}  // namespace

// ---- launchers ----

void prepend_token(Tensor& y, const Tensor& x, const Tensor& token) {
  expect_cuda_contiguous({&y, &x, &token}, "prepend_token operand");
  TIDAL_ASSERT(x.ndim() == 3, "prepend_token x {}", x.str());
  const std::int64_t B = x.dim(0), N = x.dim(1), D = x.dim(2);
  TIDAL_ASSERT(y.shape() == Shape({B, N + 1, D}) && token.numel() == D && y.dtype() == x.dtype() &&
                   token.dtype() == x.dtype(),
               "prepend_token y {} x {} token {}", y.str(), x.str(), token.str());
  const std::int64_t total = y.numel();
  if (total == 0) return;
  with_word_type(x.dtype(), [&]<class W>() {
    prepend_token_kernel<W>
        <<<blocks_for(total, kThreads), kThreads, 0, compute_stream()>>>(ptr<W>(y), ptr<W>(x), ptr<W>(token), N, D, total);
  });
  TIDAL_CUDA_CHECK_LAUNCH("prepend_token_kernel");
}

void prepend_token_backward(Tensor& dx, Tensor& dtoken, const Tensor& dy) {
  expect_cuda_contiguous({&dx, &dtoken, &dy}, "prepend_token_backward operand");
  TIDAL_ASSERT(dx.ndim() == 3, "prepend_token_backward dx {}", dx.str());
  const std::int64_t B = dx.dim(0), N = dx.dim(1), D = dx.dim(2);
  TIDAL_ASSERT(dy.shape() == Shape({B, N + 1, D}) && dtoken.numel() == D && dx.dtype() == dy.dtype() &&
                   dtoken.dtype() == dy.dtype(),
               "prepend_token_backward dy {} dx {} dtoken {}", dy.str(), dx.str(), dtoken.str());
  if (D == 0) return;
  with_float_type(dy.dtype(), [&]<class T>() {
    const std::int64_t total = dx.numel();
    if (total > 0) {
      drop_token_rows_kernel<T>
          <<<blocks_for(total, kThreads), kThreads, 0, compute_stream()>>>(ptr<T>(dx), ptr<T>(dy), N, D, total);
      TIDAL_CUDA_CHECK_LAUNCH("drop_token_rows_kernel");
    }
    if (B > 0) {
      token_grad_kernel<T><<<blocks_for(D, kThreads), kThreads, 0, compute_stream()>>>(ptr<T>(dtoken), ptr<T>(dy), B, N, D);
      TIDAL_CUDA_CHECK_LAUNCH("token_grad_kernel");
    }
  });
}

void select_token(Tensor& y, const Tensor& x, std::int64_t index) {
  expect_cuda_contiguous({&y, &x}, "select_token operand");
  TIDAL_ASSERT(x.ndim() == 3, "select_token x {}", x.str());
  const std::int64_t B = x.dim(0), T = x.dim(1), D = x.dim(2);
  TIDAL_ASSERT(y.shape() == Shape({B, D}) && y.dtype() == x.dtype() && index >= 0 && index < T,
               "select_token y {} x {} index {}", y.str(), x.str(), index);
  const std::int64_t total = y.numel();
  if (total == 0) return;
  with_word_type(x.dtype(), [&]<class W>() {
    select_token_kernel<W>
        <<<blocks_for(total, kThreads), kThreads, 0, compute_stream()>>>(ptr<W>(y), ptr<W>(x), T, D, index, total);
  });
  TIDAL_CUDA_CHECK_LAUNCH("select_token_kernel");
}

void select_token_backward(Tensor& dx, const Tensor& dy, std::int64_t index) {
  expect_cuda_contiguous({&dx, &dy}, "select_token_backward operand");
  TIDAL_ASSERT(dx.ndim() == 3, "select_token_backward dx {}", dx.str());
  const std::int64_t B = dx.dim(0), T = dx.dim(1), D = dx.dim(2);
  TIDAL_ASSERT(dy.shape() == Shape({B, D}) && dy.dtype() == dx.dtype() && index >= 0 && index < T,
               "select_token_backward dx {} dy {} index {}", dx.str(), dy.str(), index);
  const std::int64_t total = dx.numel();
  if (total == 0) return;
  with_word_type(dx.dtype(), [&]<class W>() {
    select_token_backward_kernel<W>
        <<<blocks_for(total, kThreads), kThreads, 0, compute_stream()>>>(ptr<W>(dx), ptr<W>(dy), T, D, index, total);
  });
  TIDAL_CUDA_CHECK_LAUNCH("select_token_backward_kernel");
}

}  // namespace tidal::ops::cuda
