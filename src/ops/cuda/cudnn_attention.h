// Attention through cuDNN's fused flash-attention kernels (cudnn-frontend's SDPA graphs, cuDNN 9),
// forward and backward: causal or not, grouped-query heads (cuDNN's head order is the grouped one,
// ops/cuda/attention_heads.h) and packed documents (a score bias of -inf across documents). The
// backward is cuDNN's deterministic algorithm, so gradients are the same bits run to run. The
// same contract as tidal's own kernels (ops/attention.h: y, and lse as the natural log-sum-exp of
// the scaled scores), so either backward runs after either forward.
//
// A graph per shape is built once (cuDNN's heuristics and plan build, the slow part) and kept,
// with whether cuDNN supports it. libcudnn.so.9 is loaded at the first call, not linked: a
// machine without cuDNN runs tidal's own kernels (train.attention = "auto").
#pragma once

#include "ops/attention.h"

namespace tidal::ops::cuda {

// Whether cuDNN computes this case: never under AttentionKernels::own; under automatic when the
// build has cuDNN, the library loads and the case is one it supports (bf16 / fp16, no key padding
// mask, a shape cuDNN's engines take, a document bias of at most 256 MiB); under cudnn the same,
// or an Error naming train.attention and why not.
bool attention_on_cudnn(const AttentionDims& d, DType dtype, const AttentionOptions& opt);

// ops::cuda::attention_forward / _backward for the cases attention_on_cudnn accepts.
void cudnn_attention_forward(Tensor& y, Tensor& lse, const Tensor& qkv, const AttentionDims& d,
                             const AttentionOptions& opt);
void cudnn_attention_backward(Tensor& dqkv, const Tensor& dy, const Tensor& qkv, const Tensor& y, const Tensor& lse,
                              const AttentionDims& d, const AttentionOptions& opt);

}  // namespace tidal::ops::cuda
