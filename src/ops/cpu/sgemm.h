// The CPU's GEMM libraries and which one runs a product:
//   fp32 products: MKL where it is loaded on an Intel CPU (mkl_blas.h: elsewhere its AVX2 path
//                  is slower than oneDNN), else oneDNN (onednn_matmul.h), else Debian's OpenBLAS;
//   bf16 operands: oneDNN on the CPU's bf16 instructions where it has them (ops/cpu/gemm.cpp,
//                  ops/cpu/attention.cpp), else widened to fp32 and multiplied as fp32.
// TIDAL_CPU_GEMM in the environment narrows the choice, for A/B runs and for CPUs where a library
// is slower: unset or "auto" (the order above), "mkl" (MKL required, on any CPU: an error where it
// is not loaded), "onednn" (MKL off), "openblas" (MKL and oneDNN off: the build with Debian's
// OpenBLAS alone).
#pragma once

#include "core/dtype.h"

#include <cstdint>

namespace tidal::ops::cpu {

enum class GemmChoice { automatic, mkl, onednn, openblas };

// TIDAL_CPU_GEMM's choice, read once; an unknown value or "mkl" without MKL throws Error
// naming the fix. cpu_gemm_library() settles it: the commands call that before any product.
GemmChoice gemm_choice();

// c [m, n] (leading dimension ldc) = alpha * op(a) [m, k] @ op(b) [k, n] + beta * c, fp32,
// row-major, op(x) = x^T when trans. Inside an OpenMP parallel region it runs on the calling
// thread alone (all three libraries do), outside it on all of tidal's threads.
void sgemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
           std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc);

// The same with bf16 operands into fp32 c (fp32 accumulation) on MKL, where MKL runs the fp32
// products (sgemm above) and has a bf16 GEMM; false, computing nothing, elsewhere (the caller's
// oneDNN path runs). For attention's small block products, which oneDNN 2.6 runs on a slow
// path (mkl_blas.h says the rates); the model's large products stay on oneDNN's AMX kernels.
bool sgemm_bf16(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const bf16* a,
                std::int64_t lda, const bf16* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc);

// Which library runs fp32 and which bf16 here, for `tidal info` and benchmark headers.
const char* cpu_gemm_library();

}  // namespace tidal::ops::cpu
