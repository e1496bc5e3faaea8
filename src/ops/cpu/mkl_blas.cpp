#include "ops/cpu/mkl_blas.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <string>

namespace tidal::ops::cpu {
namespace {

// MKL's C interface as libmkl_rt exports it (mkl_cblas.h, mkl_service.h): CBLAS's enum values.
using Sgemm = void (*)(int layout, int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                       const float* b, int ldb, float beta, float* c, int ldc);
using GemmBf16 = void (*)(int layout, int trans_a, int trans_b, int m, int n, int k, float alpha, const bf16* a,
                         int lda, const bf16* b, int ldb, float beta, float* c, int ldc);
using SetLayer = int (*)(int);
using VersionString = void (*)(char*, int);
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
constexpr int kInterfaceLp64 = 0, kThreadingGnu = 3;

struct Mkl {
  Sgemm sgemm = nullptr;
  GemmBf16 gemm_bf16 = nullptr;  // absent from older MKLs
  std::string description;  // loaded: its version and directory; else why not
};

std::string directory() {
  if (const char* d = std::getenv("TIDAL_MKL_DIR"); d && *d) return d;
#ifdef TIDAL_MKL_DIR_DEFAULT
  return TIDAL_MKL_DIR_DEFAULT;
#else
  return {};
#endif
}

Mkl load() {
  Mkl mkl;
  const std::string dir = directory();
  if (dir.empty()) {
    mkl.description = "this build looks for no MKL (configured with -DTIDAL_MKL=OFF) and TIDAL_MKL_DIR is unset";
    return mkl;
  }
  const std::string path = dir + "/libmkl_rt.so.3";
  // MKL's GNU threading layer calls libgomp's entry points from the global scope: make sure the
  // process's libgomp is there (inside a Python extension it may have been loaded locally).
  dlopen("libgomp.so.1", RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    mkl.description = fmt::format("no {} (scripts/mkl.sh installs it; TIDAL_MKL_DIR names another directory)", path);
    return mkl;
  }
  const auto set_interface = reinterpret_cast<SetLayer>(dlsym(lib, "MKL_Set_Interface_Layer"));
  const auto set_threading = reinterpret_cast<SetLayer>(dlsym(lib, "MKL_Set_Threading_Layer"));
  const auto version = reinterpret_cast<VersionString>(dlsym(lib, "MKL_Get_Version_String"));
  const auto sgemm = reinterpret_cast<Sgemm>(dlsym(lib, "cblas_sgemm"));
  if (!set_interface || !set_threading || !version || !sgemm) {
    mkl.description = fmt::format("{} lacks MKL's entry points", path);
    return mkl;
  }
  // Both before any other call: 32-bit integers, and GNU OpenMP (tidal's threads, not Intel's).
  if (set_interface(kInterfaceLp64) != kInterfaceLp64 || set_threading(kThreadingGnu) != kThreadingGnu) {
    mkl.description = fmt::format("{} would not take the LP64 interface on GNU OpenMP threads", path);
    return mkl;
  }
  char text[256] = {};
  version(text, sizeof text);
  // "Intel(R) oneAPI Math Kernel Library Version 2026.2-Product Build ..." -> "2026.2"
  std::string v = text;
  if (const auto at = v.find("Version "); at != std::string::npos) v = v.substr(at + 8, v.find('-', at) - at - 8);
  mkl.sgemm = sgemm;
  mkl.gemm_bf16 = reinterpret_cast<GemmBf16>(dlsym(lib, "cblas_gemm_bf16bf16f32"));
  mkl.description = fmt::format("oneMKL {} ({})", v, dir);
  return mkl;
}

const Mkl& mkl() {
  static const Mkl m = load();
  return m;
}

}  // namespace

bool mkl_available(std::string* why_not) {
  if (!mkl().sgemm && why_not) *why_not = mkl().description;
  return mkl().sgemm != nullptr;
}

bool mkl_sgemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
               std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  const Sgemm f = mkl().sgemm;
  if (!f) return false;
  f(kRowMajor, trans_a ? kTrans : kNoTrans, trans_b ? kTrans : kNoTrans, int(m), int(n), int(k), alpha, a, int(lda), b,
    int(ldb), beta, c, int(ldc));
  return true;
}

bool mkl_gemm_bf16(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                   const bf16* a, std::int64_t lda, const bf16* b, std::int64_t ldb, float beta, float* c,
                   std::int64_t ldc) {
  const GemmBf16 f = mkl().gemm_bf16;
  if (!f) return false;
  f(kRowMajor, trans_a ? kTrans : kNoTrans, trans_b ? kTrans : kNoTrans, int(m), int(n), int(k), alpha, a, int(lda), b,
    int(ldb), beta, c, int(ldc));
  return true;
}

std::string mkl_description() { return mkl().description; }

}  // namespace tidal::ops::cpu
