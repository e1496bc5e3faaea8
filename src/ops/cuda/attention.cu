// GPU attention on the fused qkv projection, flash-style (ops/attention.h): forward writes y and
// each query's log-sum-exp; backward recomputes the probabilities from them, so nothing of size
// [B, H, T, T] is ever stored. Two kernel families share the schedule (flash_dispatch.h says
// which serves a call): tensor cores for bf16 / fp16 at head width 64 or 128
// (ops/cuda/flash_tensor_core.cuh), fp32 SIMT for every other case (ops/cuda/flash_simt.cuh).
// Packed documents (AttentionOptions::doc_positions) narrow each block's tiles to its documents'
// (flash_common.cuh: key_tiles_for, query_tiles_for). Backward is FlashAttention-2's, made
// deterministic: D = rowsum(dy * y), then one kernel for dK
// and dV and one for dQ, each output element summed by one thread. Grouped-query heads (GQA,
// Ainslie et al. 2023): forward and dQ run a block per query head, reading its kv head in place;
// dK and dV run a block per kv head, which sums over its query heads in a fixed order, so the
// kv heads are never copied up to H and the sum needs no atomics. Where cuDNN serves the case
// (train.attention, ops/cuda/cudnn_attention.h) its fused kernels run instead.
#include "ops/attention.h"

#include "core/gpu.h"
#include "ops/cuda/cudnn_attention.h"
#include "ops/cuda/flash_dispatch.h"
#include "ops/cuda/flash_simt.cuh"
#include "ops/cuda/flash_tensor_core.cuh"

#include <climits>
#include <cmath>
#include <type_traits>

namespace tidal::ops::cuda {
namespace {

using Dims = AttentionDims;

Dims check(const Tensor& qkv, const Tensor& lse, const AttentionOptions& opt) {
  expect_cuda_contiguous(qkv, "attention qkv");
  expect_cuda_contiguous(lse, "attention lse");
  if (opt.key_mask) expect_cuda_contiguous(*opt.key_mask, "attention key_mask");
  if (opt.doc_positions) expect_cuda_contiguous(*opt.doc_positions, "attention doc_positions");
  return attention_dims(qkv, lse, opt);
}

FlashShape shape_of(const Dims& d, const AttentionOptions& opt) {
  TIDAL_CHECK(d.hd >= 1 && d.hd <= kSimtMaxHeadDim,
              "attention head width {} (model.n_embd / model.n_head) is outside the CUDA kernels' 1..{}; change "
              "model.n_head so that n_embd / n_head fits",
              d.hd, kSimtMaxHeadDim);
  TIDAL_CHECK(d.T < (1 << 30), "attention: sequence length {} is too long for the CUDA kernels", d.T);
  return FlashShape{int(d.T),
                    int(d.H),
                    int(d.Hkv),
                    int(d.hd),
                    d.C,
                    d.qkv_width(),
                    1.0f / std::sqrt(float(d.hd)),
                    opt.causal,
                    opt.key_mask ? opt.key_mask->data<std::int32_t>() : nullptr,
                    opt.doc_positions ? opt.doc_positions->data<std::int32_t>() : nullptr};
}

// One block per (tile, sample, head) pair; `bytes` of dynamic shared memory (above the default
// 48 KiB the kernel must opt in).
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), const char* name, std::int64_t pairs, int tiles, int threads, int bytes,
            Args... args) {
  const std::int64_t blocks = pairs * tiles;
  TIDAL_CHECK(blocks <= INT_MAX, "attention: {} (sample, head) pairs of {} tiles exceed the CUDA grid", pairs, tiles);
  if (bytes > 48 * 1024)
    TIDAL_CUDA_CALL(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  kernel<<<unsigned(blocks), threads, bytes, compute_stream()>>>(args..., pairs);
  TIDAL_CUDA_CHECK_LAUNCH(name);
}

// The head widths the tensor-core kernels are built for (any multiple of 16 up to 128 would do;
// each costs compile time): calls f.template operator()<kHd>() and returns true for one of them.
template <class F>
bool with_tensor_core_head_dim(std::int64_t hd, F&& f) {
  if (hd == 64) {
    f.template operator()<64>();
    return true;
  }
  if (hd == 128) {
    f.template operator()<128>();
    return true;
  }
  return false;
}

// The blocks of forward and dQ are per (sample, query head); those of dK and dV per (sample, kv head).
std::int64_t pairs_of(const Dims& d) { return d.B * d.H; }
std::int64_t kv_pairs_of(const Dims& d) { return d.B * d.Hkv; }

}  // namespace

FlashKernels flash_kernels_for(DType dtype, std::int64_t head_dim, std::initializer_list<const Tensor*> tensors) {
  // An empty call only asks whether a tensor-core kernel is built for head_dim.
  if ((dtype != DType::bf16 && dtype != DType::f16) || !with_tensor_core_head_dim(head_dim, [&]<int>() {}))
    return FlashKernels::simt;
  for (const Tensor* t : tensors)
    if (reinterpret_cast<std::uintptr_t>(t->raw()) % 16 != 0) return FlashKernels::simt;
  return FlashKernels::tensor_core;
}

// ---- kernels: ops/cuda/flash_common.cuh, flash_simt.cuh, flash_tensor_core.cuh ----

// ---- launchers ----

void attention_forward(Tensor& y, Tensor& lse, const Tensor& qkv, const AttentionOptions& opt) {
  const Dims d = check(qkv, lse, opt);
  expect_cuda_contiguous(y, "attention y");
  TIDAL_ASSERT(y.shape() == Shape({d.B, d.T, d.C}) && y.dtype() == qkv.dtype(), "attention y {} for qkv {}", y.str(),
               qkv.str());
  if (d.B * d.T == 0) return;
  if (attention_on_cudnn(d, qkv.dtype(), opt)) return cudnn_attention_forward(y, lse, qkv, d, opt);
  const FlashShape s = shape_of(d, opt);
  const bool tensor_cores = flash_kernels_for(qkv.dtype(), d.hd, {&qkv, &y}) == FlashKernels::tensor_core;
  with_float_type(qkv.dtype(), [&]<class T>() {
    T* py = ptr<T>(y);
    const T* pqkv = ptr<const T>(qkv);
    float* plse = ptr<float>(lse);
    if constexpr (!std::is_same_v<T, float>) {
      if (tensor_cores) {
        const bool launched = with_tensor_core_head_dim(d.hd, [&]<int kHd>() {
          launch(flash_forward_tc_kernel<T, kHd>, "flash_forward_tc_kernel", pairs_of(d), tiles_of(s.T, kTcRows),
                 kTcThreads, TcTiles<kHd>::kForwardBytes, py, plse, pqkv, s);
        });
        TIDAL_ASSERT(launched, "no tensor-core attention kernel for head width {}", d.hd);
        return;
      }
    }
    const SimtTiles st(s.hd);
    launch(flash_forward_simt_kernel<T>, "flash_forward_simt_kernel", pairs_of(d), tiles_of(s.T, st.tile),
           kSimtThreads, int(sizeof(float)) * st.forward_floats(), py, plse, pqkv, s);
  });
}

void attention_backward(Tensor& dqkv, const Tensor& dy, const Tensor& qkv, const Tensor& y, const Tensor& lse,
                        const AttentionOptions& opt) {
  const Dims d = check(qkv, lse, opt);
  expect_cuda_contiguous({&dy, &y, &dqkv}, "attention backward");
  expect_same(dqkv, qkv, "attention dqkv/qkv");
  TIDAL_ASSERT(dy.shape() == Shape({d.B, d.T, d.C}) && dy.dtype() == qkv.dtype(), "attention dy {} for qkv {}",
               dy.str(), qkv.str());
  expect_same(y, dy, "attention y/dy");
  if (d.B * d.T == 0) return;
  if (attention_on_cudnn(d, qkv.dtype(), opt)) return cudnn_attention_backward(dqkv, dy, qkv, y, lse, d, opt);
  const FlashShape s = shape_of(d, opt);
  const bool tensor_cores = flash_kernels_for(qkv.dtype(), d.hd, {&qkv, &y, &dy, &dqkv}) == FlashKernels::tensor_core;
  const std::int64_t rows = d.B * d.H * d.T;
  Tensor delta = Tensor::empty(lse.shape(), DType::f32, gpu_allocator());  // [B, H, T]: D = rowsum(dy * y)
  with_float_type(qkv.dtype(), [&]<class T>() {
    T* pdqkv = ptr<T>(dqkv);
    const T* pqkv = ptr<const T>(qkv);
    const T* pdy = ptr<const T>(dy);
    const float* plse = ptr<const float>(lse);
    const float* pdelta = ptr<const float>(delta);
    flash_row_dot_kernel<T><<<blocks_for(rows, kRowDotThreads / 32), kRowDotThreads, 0, compute_stream()>>>(
        ptr<float>(delta), pdy, ptr<const T>(y), s, rows);
    TIDAL_CUDA_CHECK_LAUNCH("flash_row_dot_kernel");
    if constexpr (!std::is_same_v<T, float>) {
      if (tensor_cores) {
        const bool launched = with_tensor_core_head_dim(d.hd, [&]<int kHd>() {
          const int tiles = tiles_of(s.T, kTcRows);
          launch(flash_key_grads_tc_kernel<T, kHd>, "flash_key_grads_tc_kernel", kv_pairs_of(d), tiles, kTcThreads,
                 TcTiles<kHd>::kKeyGradsBytes, pdqkv, pqkv, pdy, plse, pdelta, s);
          launch(flash_query_grads_tc_kernel<T, kHd>, "flash_query_grads_tc_kernel", pairs_of(d), tiles, kTcThreads,
                 TcTiles<kHd>::kQueryGradsBytes, pdqkv, pqkv, pdy, plse, pdelta, s);
        });
        TIDAL_ASSERT(launched, "no tensor-core attention kernel for head width {}", d.hd);
        return;
      }
    }
    const SimtTiles st(s.hd);
    const int tiles = tiles_of(s.T, st.tile);
    launch(flash_key_grads_simt_kernel<T>, "flash_key_grads_simt_kernel", kv_pairs_of(d), tiles, kSimtThreads,
           int(sizeof(float)) * st.key_grads_floats(), pdqkv, pqkv, pdy, plse, pdelta, s);
    launch(flash_query_grads_simt_kernel<T>, "flash_query_grads_simt_kernel", pairs_of(d), tiles, kSimtThreads,
           int(sizeof(float)) * st.query_grads_floats(), pdqkv, pqkv, pdy, plse, pdelta, s);
  });
}

}  // namespace tidal::ops::cuda
