// Which flash-attention kernels serve a GPU attention call (ops/cuda/attention.cu), visible to
// host code so the parity tests can make sure both families are exercised.
#pragma once

#include "core/tensor.h"

#include <cstdint>
#include <initializer_list>

namespace tidal::ops::cuda {

enum class FlashKernels {
  simt,         // fp32 on the CUDA cores: every dtype, head widths up to 256 (ops/cuda/flash_simt.cuh)
  tensor_core,  // bf16 / fp16 on tensor cores (ops/cuda/flash_tensor_core.cuh)
};

// Tensor cores for 16-bit storage, a head width they are built for (64 or 128) and every tensor
// of the call 16-byte aligned (their loads and stores move 16 bytes); the SIMT kernels otherwise.
FlashKernels flash_kernels_for(DType dtype, std::int64_t head_dim, std::initializer_list<const Tensor*> tensors);

}  // namespace tidal::ops::cuda
