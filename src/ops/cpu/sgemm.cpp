#include "ops/cpu/sgemm.h"

#include "core/error.h"
#include "ops/cpu/mkl_blas.h"
#include "ops/cpu/onednn_matmul.h"

#include <cblas.h>
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace tidal::ops::cpu {
namespace {

GemmChoice parse_choice() {
  const char* v = std::getenv("TIDAL_CPU_GEMM");
  if (!v || !*v || std::strcmp(v, "auto") == 0) return GemmChoice::automatic;
  if (std::strcmp(v, "onednn") == 0) return GemmChoice::onednn;
  if (std::strcmp(v, "openblas") == 0) return GemmChoice::openblas;
  TIDAL_CHECK(std::strcmp(v, "mkl") == 0,
              "TIDAL_CPU_GEMM={} is not a CPU GEMM choice: use auto (the fastest present), mkl, onednn or openblas", v);
  std::string why_not;
  TIDAL_CHECK(mkl_available(&why_not), "TIDAL_CPU_GEMM=mkl, but MKL is not loaded: {}", why_not);
  return GemmChoice::mkl;
}

// MKL's AVX-512 and AMX kernels run on Intel's CPUs only; on others it takes its AVX2 path. On an
// AMD EPYC with AVX-512 and AVX512-BF16 (2026-12-03, bench_cpu_ops, 2 threads) its fp32 products
// ran at 200 GFLOP/s against oneDNN's 400-440, and attention's bf16 blocks at 0.43x oneDNN's
// speed, so the automatic choice takes MKL on Intel's CPUs alone.
bool intel_cpu() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_is("intel");
#else
  return false;
#endif
}

bool use_mkl() {
  static const bool on = [] {
    const GemmChoice c = gemm_choice();
    return (c == GemmChoice::mkl || (c == GemmChoice::automatic && intel_cpu())) && mkl_available();
  }();
  return on;
}

}  // namespace

GemmChoice gemm_choice() {
  static const GemmChoice c = parse_choice();
  return c;
}

void sgemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
           std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (use_mkl() && mkl_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)) return;
  if (onednn_matmul(c, DType::f32, ldc, {a, DType::f32, lda, trans_a}, {b, DType::f32, ldb, trans_b}, m, n, k, alpha,
                    beta))
    return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, int(m), int(n),
              int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

bool sgemm_bf16(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const bf16* a,
                std::int64_t lda, const bf16* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  return use_mkl() && mkl_gemm_bf16(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

const char* cpu_gemm_library() {
  static const std::string name = [] {
    const char* setting = std::getenv("TIDAL_CPU_GEMM");
    const std::string fp32 = use_mkl()                       ? mkl_description()
                             : !onednn_description().empty() ? onednn_description()
                                                             : std::string("OpenBLAS");
    std::string why_not;
    std::string missing;
    if (gemm_choice() == GemmChoice::automatic && !mkl_available(&why_not))
      missing = fmt::format(" (MKL not loaded: {})", why_not);
    else if (gemm_choice() == GemmChoice::automatic && !use_mkl())
      missing = " (MKL loaded, not used: its fast kernels run on Intel's CPUs only; TIDAL_CPU_GEMM=mkl takes it)";
    const std::string bf16 = onednn_bf16_native() ? onednn_description() + " on the CPU's bf16 instructions"
                                                  : "widened to fp32 (no bf16 instructions here, or oneDNN off)";
    return fmt::format("fp32 {}{}; bf16 {}{}", fp32, missing, bf16,
                       setting && *setting ? fmt::format(" (TIDAL_CPU_GEMM={})", setting) : std::string());
  }();
  return name.c_str();
}

}  // namespace tidal::ops::cpu
