// Fused softmax + cross-entropy on the GPU (ops/cross_entropy.h): a block per row of logits,
// looping over the vocabulary with block reductions for the maximum and the sum of exponentials
// (fixed tree order: bitwise reproducible); backward recomputes each probability from the saved
// log-sum-exp, so nothing of size [N, V] is stored beside the logits.
//
// Targets outside the classes are the user error the CPU backend reports. Here the forward kernel
// records the first offending row in a device word, and the launcher reads it back (one small
// synchronisation; the loss is read on the host after this op anyway) and throws the CPU's
// message. The backward takes the targets the forward accepted and does not check them again;
// its kernel never indexes memory by a target, so a bad one cannot fault.
#include "ops/cross_entropy.h"

#include "core/gpu.h"
#include "ops/cuda/common.cuh"

namespace tidal::ops::cuda {
namespace {

constexpr int kThreads = 1024;  // a row is a vocabulary: tens of thousands of logits

// ---- kernels ----

// logits [N, V]; targets, losses, lse [N]. first_bad: the smallest row whose target is neither a
// class nor one of the two markers (integer atomicMin: the same answer whatever the timing). P
// logits an access (V a multiple of P, rows aligned for it; or P = 1).
template <int P, class T>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_forward_kernel(float* __restrict__ losses, float* __restrict__ lse,
                                 unsigned long long* __restrict__ first_bad, const T* __restrict__ logits,
                                 const std::int32_t* __restrict__ targets, std::int64_t N, std::int64_t V) {
  __shared__ float scratch[32];
  for (std::int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* row = logits + n * V;
    float mx = -INFINITY;
    for (std::int64_t j = threadIdx.x * P; j < V; j += blockDim.x * P) {
      const Pack<P, T> x = load_pack<P>(row + j);
#pragma unroll
      for (int e = 0; e < P; ++e) mx = fmaxf(mx, load(x.v[e]));
    }
    mx = block_max(mx, scratch);
    float sum = 0.0f;
    for (std::int64_t j = threadIdx.x * P; j < V; j += blockDim.x * P) {
      const Pack<P, T> x = load_pack<P>(row + j);
#pragma unroll
      for (int e = 0; e < P; ++e) sum += expf(load(x.v[e]) - mx);
    }
    const float l = mx + logf(block_sum(sum, scratch));
    if (threadIdx.x == 0) {
      const std::int32_t t = targets[n];
      lse[n] = l;
      if (t >= 0 && t < V) {
        losses[n] = l - load(row[t]);
      } else {
        losses[n] = 0.0f;
        if (t != kIgnoreIndex && t != kTargetElsewhere) atomicMin(first_bad, static_cast<unsigned long long>(n));
      }
    }
  }
}

// dlogits = scale * (exp(logits - lse) - onehot(target)), zeros on ignored rows. dlogits may
// alias logits (each element is read before its own thread writes it).
template <int P, class T>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_backward_kernel(T* dlogits, const T* logits, const float* __restrict__ lse,
                                  const std::int32_t* __restrict__ targets, float scale, std::int64_t N,
                                  std::int64_t V) {
  for (std::int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const std::int32_t t = targets[n];
    const T* row = logits + n * V;
    T* out = dlogits + n * V;
    const bool ignored = t == kIgnoreIndex;
    const float l = ignored ? 0.0f : lse[n];
    for (std::int64_t j = threadIdx.x * P; j < V; j += blockDim.x * P) {
      const Pack<P, T> x = load_pack<P>(row + j);
      Pack<P, T> d;
#pragma unroll
      for (int e = 0; e < P; ++e) {
        const float p = expf(load(x.v[e]) - l);
        d.v[e] = store<T>(ignored ? 0.0f : scale * (p - (j + e == t ? 1.0f : 0.0f)));
      }
      store_pack<P>(out + j, d);
    }
  }
}

// The shards' row figures (ops/cross_entropy.h), a thread per row. first_bad as the forward's.
__global__ void cross_entropy_shard_targets_kernel(std::int32_t* __restrict__ local,
                                                   unsigned long long* __restrict__ first_bad,
                                                   const std::int32_t* __restrict__ targets, std::int64_t N,
                                                   std::int64_t first, std::int64_t count, std::int64_t classes) {
  TIDAL_CUDA_FOR(i, N) {
    const std::int64_t t = targets[i];
    if (t == kIgnoreIndex) {
      local[i] = kIgnoreIndex;
    } else if (t < 0 || t >= classes) {
      local[i] = kIgnoreIndex;
      atomicMin(first_bad, static_cast<unsigned long long>(i));
    } else {
      local[i] = t >= first && t < first + count ? std::int32_t(t - first) : kTargetElsewhere;
    }
  }
}

__global__ void cross_entropy_shard_terms_kernel(float* __restrict__ terms, const float* __restrict__ lse,
                                                 const float* __restrict__ max_lse, const float* __restrict__ losses,
                                                 const std::int32_t* __restrict__ local, std::int64_t N) {
  TIDAL_CUDA_FOR(i, N) {
    terms[2 * i] = expf(lse[i] - max_lse[i]);
    terms[2 * i + 1] = local[i] >= 0 ? lse[i] - losses[i] : 0.0f;
  }
}

__global__ void cross_entropy_shard_combine_kernel(float* __restrict__ lse, float* __restrict__ losses,
                                                   const float* __restrict__ max_lse, const float* __restrict__ terms,
                                                   const std::int32_t* __restrict__ local, std::int64_t N) {
  TIDAL_CUDA_FOR(i, N) {
    const float l = max_lse[i] + logf(terms[2 * i]);
    lse[i] = l;
    losses[i] = local[i] == kIgnoreIndex ? 0.0f : l - terms[2 * i + 1];
  }
}

void check(const Tensor& logits, const Tensor& targets) {
  expect_cuda_contiguous(logits, "cross_entropy logits");
  expect_cuda_contiguous(targets, "cross_entropy targets");
  TIDAL_ASSERT(targets.dtype() == DType::i32 && targets.numel() == rows_of(logits), "cross_entropy targets {} for {}",
               targets.str(), logits.str());
}

constexpr int kRowThreads = 256;  // the shard ops' threads a block (a thread a row)

}  // namespace

// ---- launchers ----

void cross_entropy_forward(Tensor& losses, Tensor& lse, const Tensor& logits, const Tensor& targets) {
  if (logits.numel() == 0) return;
  check(logits, targets);
  expect_cuda_contiguous({&losses, &lse}, "cross_entropy output");
  const std::int64_t V = logits.dim(-1), N = rows_of(logits);
  TIDAL_ASSERT(losses.numel() == N && lse.numel() == N && losses.dtype() == DType::f32 && lse.dtype() == DType::f32,
               "cross_entropy losses {} lse {}", losses.str(), lse.str());
  const cudaStream_t stream = compute_stream();
  FirstBad first_bad(stream);
  with_float_type(logits.dtype(), [&]<class T>() {
    constexpr int P = kPackOf<T>;
    auto* bad = first_bad.device();
    if (rows_in_packs<P>(V, ptr<T>(logits)))
      cross_entropy_forward_kernel<P, T><<<blocks_for(N, 1), kThreads, 0, stream>>>(
          ptr<float>(losses), ptr<float>(lse), bad, ptr<T>(logits), ptr<std::int32_t>(targets), N, V);
    else
      cross_entropy_forward_kernel<1, T><<<blocks_for(N, 1), kThreads, 0, stream>>>(
          ptr<float>(losses), ptr<float>(lse), bad, ptr<T>(logits), ptr<std::int32_t>(targets), N, V);
  });
  TIDAL_CUDA_CHECK_LAUNCH("cross_entropy_forward_kernel");
  if (const std::optional<std::int64_t> bad = first_bad.position())
    TIDAL_CHECK(false, "target {} at position {} is outside the {} classes (and is not the ignore index {})",
                FirstBad::value_at(targets, *bad), *bad, V, kIgnoreIndex);
}

void cross_entropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& lse, const Tensor& targets,
                            float scale) {
  if (logits.numel() == 0) return;
  check(logits, targets);
  expect_cuda_contiguous({&dlogits, &lse}, "cross_entropy backward operand");
  expect_same(dlogits, logits, "cross_entropy dlogits/logits");
  const std::int64_t V = logits.dim(-1), N = rows_of(logits);
  TIDAL_ASSERT(lse.numel() == N && lse.dtype() == DType::f32, "cross_entropy lse {} for {}", lse.str(), logits.str());
  with_float_type(logits.dtype(), [&]<class T>() {
    constexpr int P = kPackOf<T>;
    if (rows_in_packs<P>(V, ptr<T>(logits), ptr<T>(dlogits)))
      cross_entropy_backward_kernel<P, T><<<blocks_for(N, 1), kThreads, 0, compute_stream()>>>(
          ptr<T>(dlogits), ptr<T>(logits), ptr<float>(lse), ptr<std::int32_t>(targets), scale, N, V);
    else
      cross_entropy_backward_kernel<1, T><<<blocks_for(N, 1), kThreads, 0, compute_stream()>>>(
          ptr<T>(dlogits), ptr<T>(logits), ptr<float>(lse), ptr<std::int32_t>(targets), scale, N, V);
  });
  TIDAL_CUDA_CHECK_LAUNCH("cross_entropy_backward_kernel");
}

void cross_entropy_shard_targets(Tensor& local, const Tensor& targets, std::int64_t first, std::int64_t count,
                                 std::int64_t classes) {
  expect_cuda_contiguous({&local, &targets}, "cross_entropy_shard_targets operand");
  const std::int64_t N = targets.numel();
  if (N == 0) return;
  const cudaStream_t stream = compute_stream();
  FirstBad first_bad(stream);
  cross_entropy_shard_targets_kernel<<<blocks_for(N, kRowThreads), kRowThreads, 0, stream>>>(
      ptr<std::int32_t>(local), first_bad.device(), ptr<std::int32_t>(targets), N, first, count, classes);
  TIDAL_CUDA_CHECK_LAUNCH("cross_entropy_shard_targets_kernel");
  if (const std::optional<std::int64_t> bad = first_bad.position())
    TIDAL_CHECK(false, "target {} at position {} is outside the {} classes [0, {}): check model.vocab_size (or "
                "model.num_classes) against the data", FirstBad::value_at(targets, *bad), *bad, classes, classes);
}

void cross_entropy_shard_terms(Tensor& terms, const Tensor& lse, const Tensor& max_lse, const Tensor& losses,
                               const Tensor& local) {
  expect_cuda_contiguous({&terms, &lse, &max_lse, &losses, &local}, "cross_entropy_shard_terms operand");
  const std::int64_t N = lse.numel();
  if (N == 0) return;
  cross_entropy_shard_terms_kernel<<<blocks_for(N, kRowThreads), kRowThreads, 0, compute_stream()>>>(
      ptr<float>(terms), ptr<float>(lse), ptr<float>(max_lse), ptr<float>(losses), ptr<std::int32_t>(local), N);
  TIDAL_CUDA_CHECK_LAUNCH("cross_entropy_shard_terms_kernel");
}

void cross_entropy_shard_combine(Tensor& lse, Tensor& losses, const Tensor& max_lse, const Tensor& terms,
                                 const Tensor& local) {
  expect_cuda_contiguous({&lse, &losses, &max_lse, &terms, &local}, "cross_entropy_shard_combine operand");
  const std::int64_t N = lse.numel();
  if (N == 0) return;
  cross_entropy_shard_combine_kernel<<<blocks_for(N, kRowThreads), kRowThreads, 0, compute_stream()>>>(
      ptr<float>(lse), ptr<float>(losses), ptr<float>(max_lse), ptr<float>(terms), ptr<std::int32_t>(local), N);
  TIDAL_CUDA_CHECK_LAUNCH("cross_entropy_shard_combine_kernel");
}

}  // namespace tidal::ops::cuda
