// CPU micro-benchmark: the GEMM path (ops::gemm on the shapes a transformer layer runs) and the
// attention op (forward + backward), fp32 and bf16 side by side, as GFLOP/s beside this machine's
// GEMM peak for each, measured in the same run on a large square problem (fp32: the better of
// OpenBLAS sgemm and ops::gemm; bf16: ops::gemm on bf16 operands into fp32).
//
//   bench_cpu_ops [--threads N] [--quick] [--peak-only]
#include "core/blas_kernels.h"
#include "core/init.h"
#include "ops/attention.h"
#include "ops/cast.h"
#include "ops/cpu/sgemm.h"
#include "ops/gemm.h"

#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>

using namespace tidal;

namespace {

Tensor random_tensor(const Shape& s, std::uint64_t key) {
  Tensor t = Tensor::empty(s);
  init_normal(t, {1, key}, 0.0f, 1.0f, s);
  return t;
}

// Best wall time of `reps` runs after one warm-up, in seconds.
double best_time(int reps, const std::function<void()>& f) {
  f();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

Tensor in_type(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = Tensor::empty(t.shape(), dtype);
  ops::cast(out, t);
  return out;
}

struct Peaks {
  double fp32, bf16;
};

// One line: fp32 and bf16 timings of the same work, each as GFLOP/s and % of its peak.
void row(const std::string& what, const std::string& shape, double flops, double t32, double t16, const Peaks& peak) {
  const double g32 = flops / t32 / 1e9, g16 = flops / t16 / 1e9;
  fmt::print("{:<28} {:<30} {:>8.3f} ms {:>7.1f} GF/s {:>5.1f}% | {:>8.3f} ms {:>7.1f} GF/s {:>5.1f}% | {:>5.2f}x\n",
             what, shape, t32 * 1e3, g32, 100.0 * g32 / peak.fp32, t16 * 1e3, g16, 100.0 * g16 / peak.bf16, t32 / t16);
}

}  // namespace

int main(int argc, char** argv) {
  select_blas_kernels(argv);
  int threads = omp_get_max_threads();
  bool quick = false, peak_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    else if (std::strcmp(argv[i], "--peak-only") == 0) peak_only = true;
    else {
      fmt::print(stderr, "usage: bench_cpu_ops [--threads N] [--quick] [--peak-only]\n");
      return 2;
    }
  }
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
  const int reps = quick ? 2 : 5;
  fmt::print("tidal CPU op benchmark: {} threads, OpenBLAS {} kernels ({})\n", threads, blas_kernel_name(),
             openblas_get_parallel() == 2 ? "OpenMP build" : "not the OpenMP build");
  fmt::print("CPU GEMM: {}\n", ops::cpu::cpu_gemm_library());

  // Peaks: square products, fp32 (OpenBLAS sgemm and ops::gemm) and bf16 operands (ops::gemm).
  const int n = quick ? 1024 : 2048;
  const double square = 2.0 * n * n * n;
  Tensor a = random_tensor({n, n}, 1), b = random_tensor({n, n}, 2), c = Tensor::zeros({n, n});
  const Tensor a16 = in_type(a, DType::bf16), b16 = in_type(b, DType::bf16);
  const double t_blas = best_time(reps, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data<float>(), n, b.data<float>(), n, 0.0f,
                c.data<float>(), n);
  });
  const double t_f32 = best_time(reps, [&] { ops::gemm(c, a, b); });
  const double t_bf16 = best_time(reps, [&] { ops::gemm(c, a16, b16); });
  const Peaks peak{square / std::min(t_blas, t_f32) / 1e9, square / t_bf16 / 1e9};
  fmt::print("OpenBLAS sgemm {}^3: {:.1f} GFLOP/s; ops::gemm fp32 {:.1f}, bf16 {:.1f}\n", n, square / t_blas / 1e9,
             square / t_f32 / 1e9, square / t_bf16 / 1e9);
  fmt::print("measured fp32 GEMM peak: {:.1f} GFLOP/s\nmeasured bf16 GEMM peak: {:.1f} GFLOP/s\n", peak.fp32, peak.bf16);
  fmt::print("measured SGEMM peak: {:.1f} GFLOP/s (cblas_sgemm {}^3)\n\n", square / t_blas / 1e9, n);
  if (peak_only) return 0;

  fmt::print("{:<28} {:<30} {:^34} | {:^34} | bf16 speed-up\n", "", "", "fp32 (% of fp32 peak)", "bf16 (% of bf16 peak)");
  // The GEMMs of one GPT layer at the reference config (B*T = 8*256 rows, C = 384), plus odd shapes.
  struct Case {
    const char* what;
    std::int64_t m, n, k;
    bool ta, tb;
  };
  const Case cases[] = {
      {"linear fwd qkv (x W^T)", 2048, 1152, 384, false, true},
      {"linear fwd mlp.fc", 2048, 1536, 384, false, true},
      {"linear bwd dx (dy W)", 2048, 384, 1536, false, false},
      {"linear bwd dW (dy^T x)", 1536, 384, 2048, true, false},
      {"lm head fwd (vocab 512)", 2048, 512, 384, false, true},
      {"gpt2-small mlp.fc fwd", 2048, 3072, 768, false, true},
      {"odd shape", 111, 101, 72, false, true},
      // A mixture's expert (bench/moe_train.py's wider shape: 1024 tokens, width 512, 8 experts of
      // 704, 2 a token: 256 rows an expert) against the dense SwiGLU of the same active width.
      {"dense swiglu fwd gate|up", 1024, 2816, 512, false, true},
      {"expert swiglu fwd gate|up", 256, 1408, 512, false, true},
      {"dense swiglu fwd down", 1024, 512, 1408, false, true},
      {"expert swiglu fwd down", 256, 512, 704, false, true},
      {"dense swiglu bwd dW gate|up", 2816, 512, 1024, true, false},
      {"expert swiglu bwd dW gate|up", 1408, 512, 256, true, false},
      {"dense swiglu bwd dx gate|up", 1024, 512, 2816, false, false},
      {"expert swiglu bwd dx gate|up", 256, 512, 1408, false, false},
  };
  for (const Case& k : cases) {
    Tensor ga = random_tensor(k.ta ? Shape{k.k, k.m} : Shape{k.m, k.k}, 3);
    Tensor gb = random_tensor(k.tb ? Shape{k.n, k.k} : Shape{k.k, k.n}, 4);
    const Tensor ga16 = in_type(ga, DType::bf16), gb16 = in_type(gb, DType::bf16);
    Tensor gc = Tensor::zeros({k.m, k.n}), gc16 = Tensor::zeros({k.m, k.n}, DType::bf16);
    const ops::GemmOptions opt{.trans_a = k.ta, .trans_b = k.tb};
    const double t32 = best_time(reps, [&] { ops::gemm(gc, ga, gb, opt); });
    const double t16 = best_time(reps, [&] { ops::gemm(gc16, ga16, gb16, opt); });
    row(fmt::format("gemm {}", k.what), fmt::format("m={} n={} k={}{}{}", k.m, k.n, k.k, k.ta ? " tA" : "", k.tb ? " tB" : ""),
        2.0 * double(k.m * k.n * k.k), t32, t16, peak);
  }

  // Attention at the reference config (B 8, heads 6, T 256, head dim 64), GPT-2 small's
  // (B 2, heads 12, T 1024), and an odd shape; causal.
  for (auto [B, H, T, hd] : {std::array<std::int64_t, 4>{8, 6, 256, 64}, std::array<std::int64_t, 4>{2, 12, 1024, 64},
                             std::array<std::int64_t, 4>{3, 3, 37, 24}}) {
    const std::int64_t C = H * hd;
    double tf[2], tb[2];
    for (const DType dtype : {DType::f32, DType::bf16}) {
      const int i = dtype == DType::f32 ? 0 : 1;
      Tensor qkv = in_type(random_tensor({B, T, 3 * C}, 5), dtype), dy = in_type(random_tensor({B, T, C}, 6), dtype);
      Tensor y = Tensor::empty({B, T, C}, dtype), lse = Tensor::empty({B, H, T}), dqkv = Tensor::empty(qkv.shape(), dtype);
      const ops::AttentionOptions opt{.n_head = int(H), .causal = true};
      tf[i] = best_time(reps, [&] { ops::attention_forward(y, lse, qkv, opt); });
      tb[i] = best_time(reps, [&] { ops::attention_backward(dqkv, dy, qkv, y, lse, opt); });
    }
    // Dense-equivalent FLOPs: forward 2 GEMMs of 2*T*T*hd, backward 4.
    const double f = 2.0 * T * T * hd * B * H;
    const std::string shape = fmt::format("B={} H={} T={} hd={} causal", B, H, T, hd);
    row("attention forward", shape, 2 * f, tf[0], tf[1], peak);
    row("attention backward", shape, 4 * f, tb[0], tb[1], peak);
    row("attention fwd+bwd", shape, 6 * f, tf[0] + tb[0], tf[1] + tb[1], peak);
  }

  // Packed documents (AttentionOptions::doc_positions): a causal sequence of 2048 tokens holding 8
  // documents of 256 against one document of 2048. Blocks of keys outside a query block's
  // documents are never computed, so the work falls to about 1/8 (plus the blocks' diagonals).
  {
    const std::int64_t B = 1, H = 12, T = 2048, hd = 64, C = H * hd, documents = 8;
    Tensor docs = Tensor::empty({B, T}, DType::i32);
    for (std::int64_t t = 0; t < T; ++t) docs.data<std::int32_t>()[t] = std::int32_t(t % (T / documents));
    double one[2], packed[2];
    for (const DType dtype : {DType::f32, DType::bf16}) {
      const int i = dtype == DType::f32 ? 0 : 1;
      Tensor qkv = in_type(random_tensor({B, T, 3 * C}, 7), dtype), dy = in_type(random_tensor({B, T, C}, 8), dtype);
      Tensor y = Tensor::empty({B, T, C}, dtype), lse = Tensor::empty({B, H, T});
      Tensor dqkv = Tensor::empty(qkv.shape(), dtype);
      for (const bool split : {false, true}) {
        const ops::AttentionOptions opt{.n_head = int(H), .causal = true, .doc_positions = split ? &docs : nullptr};
        const double t = best_time(reps, [&] {
          ops::attention_forward(y, lse, qkv, opt);
          ops::attention_backward(dqkv, dy, qkv, y, lse, opt);
        });
        (split ? packed : one)[i] = t;
      }
    }
    const std::string shape = fmt::format("B={} H={} T={} hd={} causal", B, H, T, hd);
    fmt::print("{:<28} {:<30} {:>8.3f} ms (fp32) {:>8.3f} ms (bf16)\n", "attention one document", shape, one[0] * 1e3,
               one[1] * 1e3);
    fmt::print("{:<28} {:<30} {:>8.3f} ms (fp32) {:>8.3f} ms (bf16)\n", "attention 8 documents", shape, packed[0] * 1e3,
               packed[1] * 1e3);
    fmt::print("attention_packed_ratio fp32 {:.3f} bf16 {:.3f} (8 documents of 256 / one of 2048, fwd+bwd; target "
               "<= 0.4)\n",
               packed[0] / one[0], packed[1] / one[1]);
  }
  return 0;
}
