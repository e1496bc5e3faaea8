// GPU attention on the fused qkv projection: the CPU backend's steps (ops/cpu/attention.cpp),
// each a kernel from ops/cuda/attention_blocks.cuh over every (sample, head) pair at once.
// Q, K and V are read in place from qkv with leading dimension 3C; bf16 / fp16 are widened on
// load and every product accumulates in fp32, so the 16-bit results are the fp32 ones rounded
// once, as on the CPU. The probabilities [B, H, T, T] stay fp32; backward's score gradient is a
// temporary of the same shape.
#include "ops/attention.h"

#include "core/gpu.h"
#include "ops/cuda/attention_blocks.cuh"

#include <cmath>
#include <type_traits>

namespace tidal::ops::cuda {
namespace {

using Dims = AttentionDims;

Dims check(const Tensor& qkv, const Tensor& probs, const AttentionOptions& opt) {
  expect_cuda_contiguous(qkv, "attention qkv");
  expect_cuda_contiguous(probs, "attention probs");
  if (opt.key_mask) expect_cuda_contiguous(*opt.key_mask, "attention key_mask");
  return attention_dims(qkv, probs, opt);
}

KeyMask key_mask_of(const Dims& d, const AttentionOptions& opt) {
  return KeyMask{opt.key_mask ? opt.key_mask->data<std::int32_t>() : nullptr, d.H, d.T, 0, opt.causal};
}

// The (b, h) matrices of a [B, T, W] tensor whose head h occupies columns offset + h * hd.
template <class T>
HeadRows<T> heads_of(const Tensor& t, std::int64_t offset, const Dims& d) {
  return HeadRows<T>{ptr<std::remove_const_t<T>>(t) + offset, t.dim(1) * t.dim(2), d.hd, t.dim(2)};
}

// The (b, h) matrices of a [B, H, T, T] fp32 tensor.
template <class T>
HeadRows<T> square_of(const Tensor& t, const Dims& d) {
  return HeadRows<T>{ptr<float>(t), d.H * d.T * d.T, d.T * d.T, d.T};
}

}  // namespace

// ---- kernels: ops/cuda/attention_blocks.cuh ----

// ---- launchers ----

void attention_forward(Tensor& y, Tensor& probs, const Tensor& qkv, const AttentionOptions& opt) {
  const Dims d = check(qkv, probs, opt);
  expect_cuda_contiguous(y, "attention y");
  TIDAL_ASSERT(y.shape() == Shape({d.B, d.T, d.C}) && y.dtype() == qkv.dtype(), "attention y {} for qkv {}", y.str(),
               qkv.str());
  if (d.B * d.T == 0) return;
  const float scale = 1.0f / std::sqrt(float(d.hd));
  with_float_type(qkv.dtype(), [&]<class T>() {
    const auto q = heads_of<const T>(qkv, 0, d), k = heads_of<const T>(qkv, d.C, d), v = heads_of<const T>(qkv, 2 * d.C, d);
    // scores = scale * Q K^T  [T, T], then the masked softmax in place
    head_matmul<false, true>(q, k, square_of<float>(probs, d), d.B, d.H, d.T, d.T, d.hd, scale, false);
    masked_softmax(ptr<float>(probs), d.B * d.H * d.T, d.T, key_mask_of(d, opt));
    // y[b, :, h] = P V  [T, hd]
    head_matmul<false, false>(square_of<const float>(probs, d), v, heads_of<T>(y, 0, d), d.B, d.H, d.T, d.hd, d.T,
                              1.0f, false);
  });
}

void attention_backward(Tensor& dqkv, const Tensor& dy, const Tensor& qkv, const Tensor& probs,
                        const AttentionOptions& opt) {
  const Dims d = check(qkv, probs, opt);
  expect_cuda_contiguous(dy, "attention dy");
  expect_cuda_contiguous(dqkv, "attention dqkv");
  expect_same(dqkv, qkv, "attention dqkv/qkv");
  TIDAL_ASSERT(dy.shape() == Shape({d.B, d.T, d.C}) && dy.dtype() == qkv.dtype(), "attention dy {} for qkv {}",
               dy.str(), qkv.str());
  if (d.B * d.T == 0) return;
  const float scale = 1.0f / std::sqrt(float(d.hd));
  Tensor dscores = Tensor::empty(probs.shape(), DType::f32, gpu_allocator());  // [B, H, T, T]
  with_float_type(qkv.dtype(), [&]<class T>() {
    const auto q = heads_of<const T>(qkv, 0, d), k = heads_of<const T>(qkv, d.C, d), v = heads_of<const T>(qkv, 2 * d.C, d);
    const auto g = heads_of<const T>(dy, 0, d);  // dO [T, hd], leading dim C
    const auto p = square_of<const float>(probs, d);
    const auto ds = square_of<float>(dscores, d);
    // dV = P^T dO
    head_matmul<true, false>(p, g, heads_of<T>(dqkv, 2 * d.C, d), d.B, d.H, d.T, d.hd, d.T, 1.0f, false);
    // dP = dO V^T, then dS = P * (dP - rowsum(dP * P)) in place
    head_matmul<false, true>(g, v, ds, d.B, d.H, d.T, d.T, d.hd, 1.0f, false);
    softmax_backward(ptr<float>(dscores), ptr<float>(probs), d.B * d.H * d.T, d.T);
    // dQ = scale * dS K ; dK = scale * dS^T Q
    const auto dsc = square_of<const float>(dscores, d);
    head_matmul<false, false>(dsc, k, heads_of<T>(dqkv, 0, d), d.B, d.H, d.T, d.hd, d.T, scale, false);
    head_matmul<true, false>(dsc, q, heads_of<T>(dqkv, d.C, d), d.B, d.H, d.T, d.hd, d.T, scale, false);
  });
}

}  // namespace tidal::ops::cuda
