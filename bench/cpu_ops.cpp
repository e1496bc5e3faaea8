// CPU micro-benchmark: the GEMM path (ops::gemm on the shapes a transformer layer runs) and the
// attention op (forward + backward), as GFLOP/s beside this machine's SGEMM peak, measured in
// the same run as OpenBLAS sgemm on a large square problem.
//
//   bench_cpu_ops [--threads N] [--quick] [--peak-only]
#include "core/blas_kernels.h"
#include "core/init.h"
#include "ops/attention.h"
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

void row(const std::string& what, const std::string& shape, double flops, double seconds, double peak) {
  const double gflops = flops / seconds / 1e9;
  fmt::print("{:<28} {:<30} {:>9.3f} ms {:>8.1f} GFLOP/s {:>6.1f}% of peak\n", what, shape, seconds * 1e3, gflops,
             100.0 * gflops / peak);
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

  // Peak: OpenBLAS sgemm, square.
  const int n = quick ? 1024 : 2048;
  Tensor a = random_tensor({n, n}, 1), b = random_tensor({n, n}, 2), c = Tensor::zeros({n, n});
  const double t_peak = best_time(reps, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data<float>(), n, b.data<float>(), n, 0.0f,
                c.data<float>(), n);
  });
  const double peak = 2.0 * n * n * n / t_peak / 1e9;
  fmt::print("measured SGEMM peak: {:.1f} GFLOP/s (cblas_sgemm {}^3)\n\n", peak, n);
  if (peak_only) return 0;

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
      {"odd shape", 111, 101, 72, false, true},
  };
  for (const Case& k : cases) {
    Tensor ga = random_tensor(k.ta ? Shape{k.k, k.m} : Shape{k.m, k.k}, 3);
    Tensor gb = random_tensor(k.tb ? Shape{k.n, k.k} : Shape{k.k, k.n}, 4);
    Tensor gc = Tensor::zeros({k.m, k.n});
    const double t = best_time(reps, [&] { ops::gemm(gc, ga, gb, {.trans_a = k.ta, .trans_b = k.tb}); });
    row(fmt::format("gemm {}", k.what), fmt::format("m={} n={} k={}{}{}", k.m, k.n, k.k, k.ta ? " tA" : "", k.tb ? " tB" : ""),
        2.0 * double(k.m * k.n * k.k), t, peak);
  }

  // Attention at the reference config: B 8, heads 6, T 256, head dim 64, causal.
  for (auto [B, H, T, hd] : {std::array<std::int64_t, 4>{8, 6, 256, 64}, std::array<std::int64_t, 4>{3, 3, 37, 24}}) {
    const std::int64_t C = H * hd;
    Tensor qkv = random_tensor({B, T, 3 * C}, 5), dy = random_tensor({B, T, C}, 6);
    Tensor y = Tensor::empty({B, T, C}), lse = Tensor::empty({B, H, T}), dqkv = Tensor::empty(qkv.shape());
    const ops::AttentionOptions opt{.n_head = int(H), .causal = true};
    const double t_f = best_time(reps, [&] { ops::attention_forward(y, lse, qkv, opt); });
    const double t_b = best_time(reps, [&] { ops::attention_backward(dqkv, dy, qkv, y, lse, opt); });
    // Dense-equivalent FLOPs: forward 2 GEMMs of 2*T*T*hd, backward 4.
    const double f = 2.0 * T * T * hd * B * H;
    const std::string shape = fmt::format("B={} H={} T={} hd={} causal", B, H, T, hd);
    row("attention forward", shape, 2 * f, t_f, peak);
    row("attention backward", shape, 4 * f, t_b, peak);
    row("attention fwd+bwd", shape, 6 * f, t_f + t_b, peak);
  }
  return 0;
}
