// Rotary embeddings on the GPU (ops/rotary.h): RoFormer's rotation (Su et al. 2021) in Hugging
// Face Llama's rotate_half layout (feature i pairs with i + hd/2), in place on a fused qkv. A
// thread per rotated pair, grid-stride; the cos/sin tables come from the host (rotary_tables),
// so both backends rotate by the same fp32 angles.
#include "ops/rotary.h"

#include "ops/cuda/common.cuh"
#include "ops/rotary_layout.h"

namespace tidal::ops::cuda {
namespace {

constexpr int kThreads = 256;

// ---- kernels ----

// qkv: [rows, W], row r at position positions[r] (or r % seq_len without them); its first
// `rotated_heads` heads of hd features (the q heads, then the k heads) are rotated. cos, sin:
// [seq_len, half]. One thread per pair (r, head, i < half); sign -1 rotates by -angle.
template <class T>
__global__ void rotary_kernel(T* __restrict__ qkv, const float* __restrict__ cos, const float* __restrict__ sin,
                              const std::int32_t* __restrict__ positions, std::int64_t pairs, std::int64_t seq_len,
                              std::int64_t W, std::int64_t rotated_heads, std::int64_t half, float sign) {
  TIDAL_CUDA_FOR(k, pairs) {
    const std::int64_t i = k % half;
    const std::int64_t head = (k / half) % rotated_heads;
    const std::int64_t r = k / (half * rotated_heads);
    const std::int64_t t = positions ? positions[r] : r % seq_len;
    T* x = qkv + r * W + head * 2 * half;
    const float a = load(x[i]), b = load(x[i + half]);
    const float c = cos[t * half + i], s = sign * sin[t * half + i];
    // x * cos + rotate_half(x) * sin, rotate_half(x) = (-x2, x1)
    x[i] = store<T>(a * c - b * s);
    x[i + half] = store<T>(b * c + a * s);
  }
}

}  // namespace

// ---- launchers ----

void rotary_apply(Tensor& qkv, const Tensor& cos, const Tensor& sin, const RotaryOptions& opt) {
  expect_cuda_contiguous({&qkv, &cos, &sin}, "rotary_apply operand");
  const RotaryLayout l = rotary_layout(qkv, cos, sin, opt);
  const std::int64_t pairs = l.rows * l.rotated_heads * l.half;
  if (pairs == 0) return;
  const float sign = opt.inverse ? -1.0f : 1.0f;
  with_float_type(qkv.dtype(), [&]<class T>() {
    rotary_kernel<T><<<blocks_for(pairs, kThreads), kThreads, 0, compute_stream()>>>(
        ptr<T>(qkv), ptr<float>(cos), ptr<float>(sin), l.positions, pairs, l.seq_len, l.width, l.rotated_heads,
        l.half, sign);
  });
  TIDAL_CUDA_CHECK_LAUNCH("rotary_kernel");
}

}  // namespace tidal::ops::cuda
