#include "ops/cuda/attention_heads.h"

#include "ops/attention.h"
#include "ops/cuda/common.cuh"

#include <cmath>

namespace tidal::ops::cuda {
namespace {

template <class T>
__global__ void copy_heads_kernel(T* grouped, std::int64_t grouped_pitch, T* tidal, std::int64_t tidal_pitch,
                                  std::int64_t rows, std::int64_t H, std::int64_t Hkv, std::int64_t width,
                                  bool to_grouped) {
  const std::int64_t row_elements = H * width;
  TIDAL_CUDA_FOR(i, rows * row_elements) {
    const std::int64_t r = i / row_elements, h = i % row_elements / width, e = i % width;
    T* g = grouped + r * grouped_pitch + output_head(h, H, Hkv) * width + e;
    T* t = tidal + r * tidal_pitch + h * width + e;
    if (to_grouped) {
      *g = *t;
    } else {
      *t = *g;
    }
  }
}

// One block per query row: its document's keys [start, end) are 0, the rest -inf.
template <class T>
__global__ void document_bias_kernel(T* bias, const std::int32_t* positions, std::int64_t T_) {
  const std::int64_t b = blockIdx.y, i = blockIdx.x;
  const Documents docs{positions + b * T_, T_};
  __shared__ std::int64_t span[2];
  if (threadIdx.x == 0) {
    span[0] = docs.start(i);
    span[1] = docs.end(i);
  }
  __syncthreads();
  T* row = bias + (b * T_ + i) * T_;
  for (std::int64_t j = threadIdx.x; j < T_; j += blockDim.x)
    row[j] = store<T>(j >= span[0] && j < span[1] ? 0.0f : -INFINITY);
}

}  // namespace

void copy_heads(void* grouped, std::int64_t grouped_pitch, void* tidal, std::int64_t tidal_pitch, DType dtype,
                std::int64_t rows, std::int64_t H, std::int64_t Hkv, std::int64_t width, bool to_grouped) {
  const std::int64_t n = rows * H * width;
  if (n == 0) return;
  with_float_type(dtype, [&]<class T>() {
    copy_heads_kernel<T><<<blocks_for(n, 256), 256, 0, compute_stream()>>>(
        static_cast<T*>(grouped), grouped_pitch, static_cast<T*>(tidal), tidal_pitch, rows, H, Hkv, width, to_grouped);
  });
  TIDAL_CUDA_CHECK_LAUNCH("copy_heads_kernel");
}

void document_bias(Tensor& bias, const Tensor& doc_positions) {
  expect_cuda_contiguous({&bias, &doc_positions}, "attention document bias");
  const std::int64_t B = doc_positions.dim(0), T = doc_positions.dim(1);
  TIDAL_ASSERT(bias.shape() == Shape({B, 1, T, T}) && doc_positions.dtype() == DType::i32,
               "document bias {} for positions {}", bias.str(), doc_positions.str());
  if (B * T == 0) return;
  TIDAL_CHECK(B <= 65535, "attention: {} samples exceed the document bias's grid (65535)", B);
  with_float_type(bias.dtype(), [&]<class E>() {
    document_bias_kernel<E><<<dim3(unsigned(T), unsigned(B)), 256, 0, compute_stream()>>>(
        ptr<E>(bias), ptr<const std::int32_t>(doc_positions), T);
  });
  TIDAL_CUDA_CHECK_LAUNCH("document_bias_kernel");
}

}  // namespace tidal::ops::cuda
