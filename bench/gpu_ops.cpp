// GPU micro-benchmarks of the CUDA backend (issue 4's figures): achieved TFLOP/s of GEMM (bf16,
// and fp32 through TF32; a Linear layer's three GEMMs at GPT-2 124M's shapes) and of attention forward + backward (causal: GPT-2 small's shape, then
// head dims 64 and 128 at sequence 1024 to 8192), and GB/s of layernorm and AdamW, each beside
// the device's peak.
// bench/gpu_ops.py runs it beside PyTorch on the same GPU and prints the ratios; alone it prints
// one JSON line per measurement (name, shape, seconds, rate, unit, peak).
//
//   bench_gpu_ops [--quick]      (--quick: the smallest size of each, for a smoke run)
#include "core/cuda/runtime.h"
#include "core/gpu.h"
#include "core/init.h"
#include "ops/attention.h"
#include "ops/cast.h"
#include "ops/gemm.h"
#include "ops/layernorm.h"
#include "ops/optimizer_step.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <string>
#include <utility>
#include <vector>

using namespace tidal;

namespace {

// Dense bf16 tensor-core peak and HBM bandwidth of the SXM parts this runs on.
struct Peak {
  double bf16_tflops = 0, tf32_tflops = 0, hbm_gbs = 0;
};

Peak peak_of(const std::string& name) {
  if (name.find("H200") != std::string::npos) return {989, 495, 4800};
  if (name.find("H100") != std::string::npos) return {989, 495, 3350};
  if (name.find("A100") != std::string::npos) return {312, 156, 2039};
  return {};
}

// Median seconds of `reps` runs of f after two warm-ups, timed by events on the compute stream.
double time_gpu(const std::function<void()>& f, int reps = 10) {
  cudaStream_t s = cuda::compute_stream();
  cudaEvent_t a, b;
  TIDAL_CUDA_CALL(cudaEventCreate(&a));
  TIDAL_CUDA_CALL(cudaEventCreate(&b));
  f();
  f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    TIDAL_CUDA_CALL(cudaEventRecord(a, s));
    f();
    TIDAL_CUDA_CALL(cudaEventRecord(b, s));
    TIDAL_CUDA_CALL(cudaEventSynchronize(b));
    float ms = 0;
    TIDAL_CUDA_CALL(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1e-3);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

Tensor random_gpu(const Shape& shape, DType dtype, std::uint64_t key) {
  Tensor f = Tensor::empty(shape);
  init_normal(f, {0xbe7c, key}, 0.0f, 1.0f, shape);
  Tensor typed = f;
  if (dtype != DType::f32) {
    typed = Tensor::empty(shape, dtype);
    ops::cast(typed, f);
  }
  return typed.clone(gpu_allocator());
}

void report(const std::string& name, const std::string& shape, double seconds, double rate, const char* unit,
            double peak) {
  fmt::print("{{\"name\": \"{}\", \"shape\": \"{}\", \"seconds\": {:.6g}, \"rate\": {:.4g}, \"unit\": \"{}\", "
             "\"peak\": {:.4g}, \"of_peak\": {:.3f}}}\n",
             name, shape, seconds, rate, unit, peak, peak > 0 ? rate / peak : 0.0);
  std::fflush(stdout);
}

void bench_gemm(const Peak& peak, bool quick) {
  for (std::int64_t n : quick ? std::vector<std::int64_t>{1024} : std::vector<std::int64_t>{4096, 8192}) {
    for (const bool tf32 : {false, true}) {
      const DType dtype = tf32 ? DType::f32 : DType::bf16;
      Tensor a = random_gpu({n, n}, dtype, 1), b = random_gpu({n, n}, dtype, 2);
      Tensor c = Tensor::empty({n, n}, dtype, gpu_allocator());
      const double s = time_gpu([&] { ops::gemm(c, a, b, {.tf32 = tf32}); });
      report(tf32 ? "gemm_tf32" : "gemm_bf16", fmt::format("{0}x{0}x{0}", n), s, 2.0 * double(n * n * n) / s / 1e12,
             "TFLOP/s", tf32 ? peak.tf32_tflops : peak.bf16_tflops);
    }
  }
}

// The three GEMMs of a Linear layer in training, GPT-2 124M's four shapes (in -> out features)
// over M tokens, bf16: forward y = x W^T + b (the bias in cuBLASLt's epilogue), the input's
// gradient dx = dy W, and the weight's dW += dy^T x (beta 1: gradients accumulate in place).
void bench_linear(const Peak& peak, bool quick) {
  const std::int64_t M = quick ? 4096 : 32768;
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes{{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};
  for (const auto& [in, out] : shapes) {
    Tensor x = random_gpu({M, in}, DType::bf16, 5), w = random_gpu({out, in}, DType::bf16, 6);
    Tensor b = random_gpu({out}, DType::bf16, 7), dy = random_gpu({M, out}, DType::bf16, 8);
    Tensor y = Tensor::empty({M, out}, DType::bf16, gpu_allocator());
    Tensor dx = Tensor::empty({M, in}, DType::bf16, gpu_allocator());
    Tensor dw = random_gpu({out, in}, DType::bf16, 9);
    const double flops = 2.0 * double(M) * double(in) * double(out);
    const std::string shape = fmt::format("{}x{}x{}", M, in, out);
    const double fwd = time_gpu([&] { ops::gemm(y, x, w, {.trans_b = true, .bias = &b}); });
    report("linear_forward_bf16", shape, fwd, flops / fwd / 1e12, "TFLOP/s", peak.bf16_tflops);
    const double dgrad = time_gpu([&] { ops::gemm(dx, dy, w); });
    report("linear_dgrad_bf16", shape, dgrad, flops / dgrad / 1e12, "TFLOP/s", peak.bf16_tflops);
    const double wgrad = time_gpu([&] { ops::gemm(dw, dy, x, {.trans_a = true, .beta = 1.0f}); });
    report("linear_wgrad_bf16", shape, wgrad, flops / wgrad / 1e12, "TFLOP/s", peak.bf16_tflops);
  }
}

// One causal attention forward + backward in bf16 (the tensor-core kernels at head widths 64 and
// 128), backward from forward's y and lse as in training; returns its seconds. With `documents`
// > 1 each sequence packs that many documents of T / documents (AttentionOptions::doc_positions),
// the FLOPs still counted as one causal document's (the work the skipped tiles save shows as time).
double time_attention(const Peak& peak, std::int64_t B, int H, std::int64_t T, int head_dim, int documents = 1) {
  const std::int64_t C = std::int64_t(H) * head_dim;
  Tensor docs;
  if (documents > 1) {
    Tensor host = Tensor::empty({B, T}, DType::i32);
    for (std::int64_t i = 0; i < B * T; ++i) host.data<std::int32_t>()[i] = std::int32_t(i % T % (T / documents));
    docs = host.clone(gpu_allocator());
  }
  Tensor qkv = random_gpu({B, T, 3 * C}, DType::bf16, 3), dy = random_gpu({B, T, C}, DType::bf16, 4);
  Tensor y = Tensor::empty({B, T, C}, DType::bf16, gpu_allocator());
  Tensor lse = Tensor::empty({B, H, T}, DType::f32, gpu_allocator());
  Tensor dqkv = Tensor::empty({B, T, 3 * C}, DType::bf16, gpu_allocator());
  const ops::AttentionOptions opt{.n_head = H, .causal = true, .doc_positions = docs.defined() ? &docs : nullptr};
  const double s = time_gpu(
      [&] {
        ops::attention_forward(y, lse, qkv, opt);
        ops::attention_backward(dqkv, dy, qkv, y, lse, opt);
      },
      5);
  // FlashAttention-2's count: forward 4 B H T^2 d, backward 2.5x, causal half.
  const double flops = 3.5 * 4.0 * double(B * H) * double(T * T) * head_dim / 2.0;
  report(fmt::format("attention_causal_d{}{}", head_dim, documents > 1 ? fmt::format("_{}docs", documents) : ""),
         fmt::format("B{} H{} T{}", B, H, T), s, flops / s / 1e12, "TFLOP/s", peak.bf16_tflops);
  return s;
}

void bench_attention(const Peak& peak, bool quick) {
  time_attention(peak, 8, 12, 1024, 64);  // GPT-2 small's attention at batch 8
  // A sequence of 2048 packing 8 documents against one document (issue target: <= 0.4x).
  const double one = time_attention(peak, 8, 12, 2048, 64), packed = time_attention(peak, 8, 12, 2048, 64, 8);
  fmt::print("attention_packed_ratio {:.3f} (8 documents of 256 / one of 2048, B8 H12 d64, fwd+bwd; target <= 0.4)\n",
             packed / one);
  if (quick) return;
  for (const int head_dim : {64, 128})
    for (const std::int64_t T : {1024, 2048, 4096, 8192})
      time_attention(peak, std::max<std::int64_t>(1, 16384 / T), 2048 / head_dim, T, head_dim);  // width 2048
}

void bench_memory_bound(const Peak& peak, bool quick) {
  const std::int64_t rows = quick ? 4096 : 16384, C = 4096;
  Tensor x = random_gpu({rows, C}, DType::bf16, 5), w = random_gpu({C}, DType::bf16, 6), b = random_gpu({C}, DType::bf16, 7);
  Tensor y = Tensor::empty({rows, C}, DType::bf16, gpu_allocator());
  Tensor mean = Tensor::empty({rows}, DType::f32, gpu_allocator()), rstd = Tensor::empty({rows}, DType::f32, gpu_allocator());
  double s = time_gpu([&] { ops::layernorm_forward(y, mean, rstd, x, w, b, 1e-5f); });
  report("layernorm_forward_bf16", fmt::format("{}x{}", rows, C), s, 2.0 * double(x.nbytes()) / s / 1e9, "GB/s",
         peak.hbm_gbs);

  const std::int64_t n = quick ? (1 << 24) : (1 << 28);
  Tensor p = random_gpu({n}, DType::f32, 8), g = random_gpu({n}, DType::bf16, 9);
  Tensor m = Tensor::zeros({n}, DType::f32, gpu_allocator()), v = Tensor::zeros({n}, DType::f32, gpu_allocator());
  std::int64_t step = 0;
  s = time_gpu([&] { ops::adamw_step(p, g, m, v, {.weight_decay = 0.1f}, ++step); });
  // Reads p, g, m, v; writes p, m, v.
  const double bytes = double(n) * (4 * 3 * 2 + 2);
  report("adamw_bf16_grads", fmt::format("{} params", n), s, bytes / s / 1e9, "GB/s", peak.hbm_gbs);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  if (!gpu_available()) {
    fmt::print(stderr, "bench_gpu_ops: {}\n", gpu_description());
    return 2;
  }
  cudaDeviceProp prop{};
  TIDAL_CUDA_CALL(cudaGetDeviceProperties(&prop, 0));
  const Peak peak = peak_of(prop.name);
  fmt::print("{{\"device\": \"{}\", \"bf16_peak_tflops\": {}, \"hbm_peak_gbs\": {}}}\n", gpu_description(),
             peak.bf16_tflops, peak.hbm_gbs);
  try {
    bench_gemm(peak, quick);
    bench_linear(peak, quick);
    bench_attention(peak, quick);
    bench_memory_bound(peak, quick);
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_gpu_ops: {}\n", e.what());
    return 1;
  }
  return 0;
}
