// GPU ring-attention blocks: the CPU backend's pieces (ops/cpu/ring_attention.cpp), each one
// kernel from ops/cuda/attention_blocks.cuh per query head of a kv group (one launch with
// Hkv = H) over every (sample, kv head) pair, on a column block of the probabilities (leading
// dimension T, the whole sequence) and one head's columns of q, y (leading dimension C), k or v
// (leading dimension Ckv). fp32 only, like the CPU backend.
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

// Checks a key / value block [B, Tk, Ckv] at first_key; returns Tk.
std::int64_t check_block(const Dims& d, const Tensor& block, std::int64_t first_key) {
  expect_cuda_contiguous(block, "ring attention block");
  return ring_attention_block(d, block, first_key);
}

// A product runs in group() launches; launch i covers the i-th query head of every kv head,
// h = query_head_of(g, i, Hkv) for g = 0 .. Hkv - 1, as a grid over (b, g). Each operand's
// offset(h) is affine in g (ops/attention.h's head maps), so its (b, g) matrices are HeadRows
// at offset(h of g = 0) with head stride offset(h of g = 1) - offset(h of g = 0). Launches of one
// stream run in order, so a kv head's key and value gradients sum its query heads in order.
template <class T, class Offset>
HeadRows<T> rows_of(const Tensor& t, std::int64_t batch, std::int64_t ld, const Dims& d, std::int64_t i,
                    Offset offset) {
  const std::int64_t first = offset(query_head_of(0, i, d.Hkv)), second = offset(query_head_of(1, i, d.Hkv));
  return HeadRows<T>{ptr<float>(t) + first, batch, second - first, ld};
}
// q or dq [B, rows, C], query order.
template <class T>
HeadRows<T> queries_of(const Tensor& t, const Dims& d, std::int64_t i) {
  return rows_of<T>(t, t.dim(1) * d.C, d.C, d, i, [&](std::int64_t h) { return d.query_offset(h); });
}
// y or dy [B, rows, C], grouped order.
template <class T>
HeadRows<T> outputs_of(const Tensor& t, const Dims& d, std::int64_t i) {
  return rows_of<T>(t, t.dim(1) * d.C, d.C, d, i, [&](std::int64_t h) { return d.output_offset(h); });
}
// A key / value block or its gradient [B, Tk, Ckv].
template <class T>
HeadRows<T> kv_of(const Tensor& t, const Dims& d, std::int64_t i) {
  return rows_of<T>(t, t.dim(1) * d.kv_width(), d.kv_width(), d, i, [&](std::int64_t h) { return d.kv_offset(h); });
}
// The [Tq, Tk] matrices of the probabilities' columns [first_key, first_key + Tk).
template <class T>
HeadRows<T> block_of(const Tensor& probs, const Dims& d, std::int64_t first_key, std::int64_t i) {
  HeadRows<T> rows = rows_of<T>(probs, d.H * d.Tq * d.T, d.T, d, i, [&](std::int64_t h) { return h * d.Tq * d.T; });
  rows.data += first_key;
  return rows;
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
  for (std::int64_t i = 0; i < d.group(); ++i)
    head_matmul<false, true>(queries_of<const float>(q, d, i), kv_of<const float>(k, d, i),
                             block_of<float>(probs, d, first_key, i), d.B, d.Hkv, d.Tq, Tk, d.hd, d.scale, false);
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
  for (std::int64_t i = 0; i < d.group(); ++i)
    head_matmul<false, false>(block_of<const float>(probs, d, first_key, i), kv_of<const float>(v, d, i),
                              outputs_of<float>(y, d, i), d.B, d.Hkv, d.Tq, d.hd, Tk, 1.0f, true);
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
  for (std::int64_t i = 0; i < d.group(); ++i)
    head_matmul<false, true>(outputs_of<const float>(dy, d, i), kv_of<const float>(v, d, i),
                             block_of<float>(dprobs, d, first_key, i), d.B, d.Hkv, d.Tq, Tk, d.hd, 1.0f, false);
}

void attention_values_grad(Tensor& dv, const Tensor& probs, const Tensor& dy, std::int64_t first_key,
                           const RingAttentionOptions& opt) {
  const Dims d = check(probs, dy, opt);
  const std::int64_t Tk = check_block(d, dv, first_key);
  if (after_all_queries(opt, d, first_key)) return;
  for (std::int64_t i = 0; i < d.group(); ++i)
    head_matmul<true, false>(block_of<const float>(probs, d, first_key, i), outputs_of<const float>(dy, d, i),
                             kv_of<float>(dv, d, i), d.B, d.Hkv, Tk, d.hd, d.Tq, 1.0f, true);
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
  for (std::int64_t i = 0; i < d.group(); ++i)
    head_matmul<false, false>(block_of<const float>(dscores, d, first_key, i), kv_of<const float>(k, d, i),
                              queries_of<float>(dq, d, i), d.B, d.Hkv, d.Tq, d.hd, Tk, d.scale, true);
}

void attention_key_grad(Tensor& dk, const Tensor& dscores, const Tensor& q, std::int64_t first_key,
                        const RingAttentionOptions& opt) {
  const Dims d = check(dscores, q, opt);
  const std::int64_t Tk = check_block(d, dk, first_key);
  if (after_all_queries(opt, d, first_key)) return;
  for (std::int64_t i = 0; i < d.group(); ++i)
    head_matmul<true, false>(block_of<const float>(dscores, d, first_key, i), queries_of<const float>(q, d, i),
                             kv_of<float>(dk, d, i), d.B, d.Hkv, Tk, d.hd, d.Tq, d.scale, true);
}

}  // namespace tidal::ops::cuda
