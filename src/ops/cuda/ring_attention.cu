// GPU ring-attention blocks: the CPU backend's pieces (ops/cpu/ring_attention.cpp), each one
// kernel from ops/cuda/attention_blocks.cuh over every (sample, head) pair, on a column block of
// the probabilities (leading dimension T, the whole sequence) and one head's columns of q, k or v
// (leading dimension C). fp32 only, like the CPU backend.
#include "ops/ring_attention.h"

#include "ops/cuda/attention_blocks.cuh"


namespace tidal::ops::cuda {
namespace {

using Dims = RingAttentionDims;

// Checks probs [B, H, Tq, T] against this rank's queries `local` [B, Tq, C].
Dims check(const Tensor& probs, const Tensor& local, const RingAttentionOptions& opt) {
  expect_cuda_contiguous({&probs, &local}, "ring attention");
  if (opt.key_mask) expect_cuda_contiguous(*opt.key_mask, "ring attention key_mask");
  return ring_attention_dims(probs, local, opt);
}

// Checks a key / value block [B, Tk, C] at first_key; returns Tk.
std::int64_t check_block(const Dims& d, const Tensor& block, std::int64_t first_key) {
  expect_cuda_contiguous(block, "ring attention block");
  return ring_attention_block(d, block, first_key);
}

// The (b, h) matrices of a [B, rows, C] tensor: head h is columns [h * hd, (h + 1) * hd).
template <class T>
HeadRows<T> heads_of(const Tensor& t, const Dims& d) {
  return HeadRows<T>{ptr<float>(t), t.dim(1) * d.C, d.hd, d.C};
}

// The (b, h) matrices [Tq, Tk] of the probabilities' columns [first_key, first_key + Tk).
template <class T>
HeadRows<T> block_of(const Tensor& probs, const Dims& d, std::int64_t first_key) {
  return HeadRows<T>{ptr<float>(probs) + first_key, d.H * d.Tq * d.T, d.Tq * d.T, d.T};
}

// ---- kernels ----

// Zeros columns [0, width) of `rows` rows of pitch `ld` starting at p.
__global__ void zero_columns_kernel(float* p, std::int64_t rows, std::int64_t width, std::int64_t ld) {
  TIDAL_CUDA_FOR(i, rows * width) p[(i / width) * ld + i % width] = 0.0f;
}

constexpr int kThreads = 256;

}  // namespace

// ---- launchers ----

void attention_scores(Tensor& probs, const Tensor& q, const Tensor& k, std::int64_t first_key,
                      const RingAttentionOptions& opt) {
  const Dims d = check(probs, q, opt);
  const std::int64_t Tk = check_block(d, k, first_key);
  if (after_all_queries(opt, d, first_key)) return;  // never read: the softmax masks it
  head_matmul<false, true>(heads_of<const float>(q, d), heads_of<const float>(k, d), block_of<float>(probs, d, first_key),
                           d.B, d.H, d.Tq, Tk, d.hd, d.scale, false);
}

void attention_softmax(Tensor& probs, const RingAttentionOptions& opt) {
  expect_cuda_contiguous(probs, "ring attention probs");
  TIDAL_ASSERT(probs.dtype() == DType::f32 && probs.ndim() == 4, "ring attention probs {}", probs.str());
  const std::int64_t B = probs.dim(0), H = probs.dim(1), Tq = probs.dim(2), T = probs.dim(3);
  if (opt.key_mask) {
    expect_cuda_contiguous(*opt.key_mask, "ring attention key_mask");
    TIDAL_ASSERT(opt.key_mask->dtype() == DType::i32 && opt.key_mask->shape() == Shape({B, T}),
                 "ring attention key_mask {}", opt.key_mask->str());
  }
  const KeyMask mask{opt.key_mask ? opt.key_mask->data<std::int32_t>() : nullptr, H, Tq, opt.first_query, opt.causal};
  masked_softmax(ptr<float>(probs), B * H * Tq, T, mask);
}

void attention_values(Tensor& y, const Tensor& probs, const Tensor& v, std::int64_t first_key,
                      const RingAttentionOptions& opt) {
  const Dims d = check(probs, y, opt);
  const std::int64_t Tk = check_block(d, v, first_key);
  if (after_all_queries(opt, d, first_key)) return;
  head_matmul<false, false>(block_of<const float>(probs, d, first_key), heads_of<const float>(v, d),
                            heads_of<float>(y, d), d.B, d.H, d.Tq, d.hd, Tk, 1.0f, true);
}

void attention_probs_grad(Tensor& dprobs, const Tensor& dy, const Tensor& v, std::int64_t first_key,
                          const RingAttentionOptions& opt) {
  const Dims d = check(dprobs, dy, opt);
  const std::int64_t Tk = check_block(d, v, first_key);
  if (after_all_queries(opt, d, first_key)) {  // zero, not left as is: the softmax backward multiplies it by P = 0
    const std::int64_t rows = d.B * d.H * d.Tq;
    if (rows * Tk == 0) return;
    zero_columns_kernel<<<blocks_for(rows * Tk, kThreads), kThreads, 0, compute_stream()>>>(
        ptr<float>(dprobs) + first_key, rows, Tk, d.T);
    TIDAL_CUDA_CHECK_LAUNCH("zero_columns_kernel");
    return;
  }
  head_matmul<false, true>(heads_of<const float>(dy, d), heads_of<const float>(v, d),
                           block_of<float>(dprobs, d, first_key), d.B, d.H, d.Tq, Tk, d.hd, 1.0f, false);
}

void attention_values_grad(Tensor& dv, const Tensor& probs, const Tensor& dy, std::int64_t first_key,
                           const RingAttentionOptions& opt) {
  const Dims d = check(probs, dy, opt);
  const std::int64_t Tk = check_block(d, dv, first_key);
  if (after_all_queries(opt, d, first_key)) return;
  head_matmul<true, false>(block_of<const float>(probs, d, first_key), heads_of<const float>(dy, d),
                           heads_of<float>(dv, d), d.B, d.H, Tk, d.hd, d.Tq, 1.0f, true);
}

void attention_softmax_backward(Tensor& dprobs, const Tensor& probs) {
  expect_cuda_contiguous({&dprobs, &probs}, "ring attention softmax backward");
  expect_same(dprobs, probs, "ring attention dprobs/probs");
  TIDAL_ASSERT(probs.dtype() == DType::f32 && probs.ndim() > 0, "ring attention probs {}", probs.str());
  const std::int64_t T = probs.dim(-1);
  if (T == 0) return;
  softmax_backward(ptr<float>(dprobs), ptr<float>(probs), probs.numel() / T, T);
}

void attention_query_grad(Tensor& dq, const Tensor& dscores, const Tensor& k, std::int64_t first_key,
                          const RingAttentionOptions& opt) {
  const Dims d = check(dscores, dq, opt);
  const std::int64_t Tk = check_block(d, k, first_key);
  if (after_all_queries(opt, d, first_key)) return;
  head_matmul<false, false>(block_of<const float>(dscores, d, first_key), heads_of<const float>(k, d),
                            heads_of<float>(dq, d), d.B, d.H, d.Tq, d.hd, Tk, d.scale, true);
}

void attention_key_grad(Tensor& dk, const Tensor& dscores, const Tensor& q, std::int64_t first_key,
                        const RingAttentionOptions& opt) {
  const Dims d = check(dscores, q, opt);
  const std::int64_t Tk = check_block(d, dk, first_key);
  if (after_all_queries(opt, d, first_key)) return;
  head_matmul<true, false>(block_of<const float>(dscores, d, first_key), heads_of<const float>(q, d),
                           heads_of<float>(dk, d), d.B, d.H, Tk, d.hd, d.Tq, d.scale, true);
}

}  // namespace tidal::ops::cuda
