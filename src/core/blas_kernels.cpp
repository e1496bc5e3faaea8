#include "core/blas_kernels.h"

#include <cblas.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace tidal {
namespace {

const char* best_supported_kernels() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return nullptr;
}

bool is_generic_fallback(const char* name) {
  for (const char* generic : {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Katmai", "Northwood", "Banias"})
    if (std::strcmp(name, generic) == 0) return true;
  return false;
}

}  // namespace

const char* blas_kernel_name() { return openblas_get_corename(); }

const char* better_blas_kernels() {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr || std::getenv("TIDAL_KEEP_BLAS_KERNELS") != nullptr) return nullptr;
  const char* best = best_supported_kernels();
  return best != nullptr && is_generic_fallback(openblas_get_corename()) ? best : nullptr;
}

void select_blas_kernels(char** argv) {
  const char* best = better_blas_kernels();
  if (best == nullptr) return;
  ::setenv("OPENBLAS_CORETYPE", best, 1);
  ::execv("/proc/self/exe", argv);
  // execv only returns on failure: run on with the generic kernels.
}

}  // namespace tidal
