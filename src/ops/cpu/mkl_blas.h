// Intel oneMKL's sgemm, loaded at run time from the libraries scripts/mkl.sh installs from PyPI
// (libmkl_rt.so.3 in $TIDAL_MKL_DIR, else the directory the build was configured with). On the
// 2-core AVX-512 VM, GPT-2 small's fp32 step spends 5.2-5.8 s in GEMMs on it against 7.5 s on
// oneDNN 2.6 (train.profile), and whole reference-GPT runs take 6.5% less wall time than on
// oneDNN (5 paired runs). Loaded with its own symbols kept apart (RTLD_LOCAL), so OpenBLAS's
// cblas_sgemm stays OpenBLAS's, and on its GNU OpenMP threading layer, so it shares tidal's
// OpenMP threads and runs serially inside a parallel region. Absent, it is simply not used.
#pragma once

#include "core/dtype.h"

#include <cstdint>
#include <string>

namespace tidal::ops::cpu {

// Whether MKL is loaded (the first call tries). `why_not` says where it was looked for.
bool mkl_available(std::string* why_not = nullptr);

// c [m, n] (leading dimension ldc) = alpha * op(a) [m, k] @ op(b) [k, n] + beta * c, row-major,
// op(x) = x^T when trans; false, computing nothing, when MKL is not loaded.
bool mkl_sgemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
               std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc);

// The same with bf16 operands into fp32 c (cblas_gemm_bf16bf16f32: fp32 accumulation, on AMX tiles
// or AVX512-BF16 where the CPU has them); false when MKL is not loaded or lacks it. On the 2-core
// AMX VM one thread runs attention's block products (64 x 64 x 64 to 64 x 256 x 128) at 140-240
// GFLOP/s this way, against about 60 on oneDNN 2.6 (its "gemm:jit" for these strided operands)
// and 80-100 for MKL's fp32 sgemm.
bool mkl_gemm_bf16(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                   const bf16* a, std::int64_t lda, const bf16* b, std::int64_t ldb, float beta, float* c,
                   std::int64_t ldc);

// "oneMKL 2026.0.2 (<directory>)" when loaded.
std::string mkl_description();

}  // namespace tidal::ops::cpu
