// The CPU AdamW that updates host-resident chunks (hybrid Adam, patrickstar-v2 §7.2): parameters
// per second of ops::cpu::adamw_step. bench/cpu_adam.py runs it beside PyTorch's CPU AdamW on the
// same tensors and prints the ratio; this binary is its half of the measurement.
//
//   bench_cpu_adam --numel N --steps K [--grad f32|f16|bf16] [--in FILE --out FILE]
//
// --in: N fp32 parameters then N fp32 gradients (raw, little-endian), as written by the script;
// without it the tensors are drawn from a normal. The same gradient is applied K times (timed
// one by one, after one untimed step). --out writes the parameters after the K+1 steps. Prints
// one JSON line: numel, steps, grad dtype, threads, best and median seconds per step, params/s.
#include "core/init.h"
#include "ops/cast.h"
#include "ops/optimizer_step.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace tidal;

namespace {

bool read_raw(const std::string& path, Tensor& p, Tensor& g) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  const auto n = std::size_t(p.numel());
  const bool ok = std::fread(p.data<float>(), sizeof(float), n, f) == n && std::fread(g.data<float>(), sizeof(float), n, f) == n;
  std::fclose(f);
  return ok;
}

bool write_raw(const std::string& path, const Tensor& p) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const bool ok = std::fwrite(p.data<float>(), sizeof(float), std::size_t(p.numel()), f) == std::size_t(p.numel());
  return std::fclose(f) == 0 && ok;
}

int usage() {
  fmt::print(stderr, "usage: bench_cpu_adam --numel N --steps K [--grad f32|f16|bf16] [--in FILE --out FILE]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t numel = 1 << 24;
  int steps = 10;
  std::string grad_dtype = "f32", in_path, out_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    if (a == "--numel") numel = std::atoll(argv[++i]);
    else if (a == "--steps") steps = std::atoi(argv[++i]);
    else if (a == "--grad") grad_dtype = argv[++i];
    else if (a == "--in") in_path = argv[++i];
    else if (a == "--out") out_path = argv[++i];
    else return usage();
  }
  if (numel <= 0 || steps <= 0 || (grad_dtype != "f32" && grad_dtype != "f16" && grad_dtype != "bf16")) return usage();

  Tensor param = Tensor::empty({numel}), grad32 = Tensor::empty({numel});
  if (!in_path.empty()) {
    if (!read_raw(in_path, param, grad32)) {
      fmt::print(stderr, "bench_cpu_adam: cannot read {} fp32 parameters and gradients from {}\n", numel, in_path);
      return 2;
    }
  } else {
    init_normal(param, {1, 1}, 0.0f, 1.0f, param.shape());
    init_normal(grad32, {1, 2}, 0.0f, 1e-2f, grad32.shape());
  }
  const DType gd = grad_dtype == "f16" ? DType::f16 : grad_dtype == "bf16" ? DType::bf16 : DType::f32;
  Tensor grad = grad32;
  if (gd != DType::f32) {
    grad = Tensor::empty({numel}, gd);
    ops::cast(grad, grad32);
  }
  Tensor m = Tensor::zeros({numel}), v = Tensor::zeros({numel});
  // PyTorch's defaults beside a decay, as the script's optimizer is built.
  const ops::AdamWOptions opt{.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f};

  ops::adamw_step(param, grad, m, v, opt, 1);
  std::vector<double> seconds;
  for (int s = 0; s < steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    ops::adamw_step(param, grad, m, v, opt, s + 2);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  if (!out_path.empty() && !write_raw(out_path, param)) {
    fmt::print(stderr, "bench_cpu_adam: cannot write {}\n", out_path);
    return 2;
  }
  std::sort(seconds.begin(), seconds.end());
  const double best = seconds.front(), median = seconds[seconds.size() / 2];
  fmt::print(
      "{{\"numel\": {}, \"steps\": {}, \"grad\": \"{}\", \"threads\": {}, \"best_s\": {:.6g}, \"median_s\": {:.6g}, "
      "\"params_per_s\": {:.6g}}}\n",
      numel, steps, grad_dtype, omp_get_max_threads(), best, median, double(numel) / median);
  return 0;
}
