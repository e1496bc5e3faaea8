// oneDNN's matmul behind the CPU GEMM (ops/cpu/gemm.cpp) and attention's block products: bf16
// operands run on the CPU's bf16 instructions (AVX512-BF16 dot products, AMX tiles where the
// CPU has them) with fp32 accumulation, fp32 operands on its AVX-512 / AVX2 kernels. oneDNN
// picks its kernels by the CPU's features at run time; where it has none for the operand types
// (bf16 on a CPU without bf16 instructions would be emulated), the caller's fp32 path runs.
//
// TIDAL_CPU_GEMM=openblas in the environment turns this path off (the build then behaves as one
// without oneDNN: cmake -DTIDAL_ONEDNN=OFF); fp32 products come here only where MKL does not run
// them (ops/cpu/sgemm.h).
#pragma once

#include "core/dtype.h"

#include <cstdint>
#include <string>

namespace tidal::ops::cpu {

struct MatmulOperand {
  const void* data;
  DType dtype;
  std::int64_t ld;  // leading dimension as stored (row-major)
  bool trans;       // stored transposed: op(x) = x^T
};

// c [m, n] (leading dimension ldc, type c_type) = alpha * op(a) [m, k] @ op(b) [k, n] + beta * c,
// accumulated in fp32 and rounded into c once. Returns false, computing nothing, when oneDNN is
// off or has no fast kernel for these types on this CPU. Thread safe; inside an OpenMP parallel
// region it runs on the calling thread alone.
bool onednn_matmul(void* c, DType c_type, std::int64_t ldc, const MatmulOperand& a, const MatmulOperand& b,
                   std::int64_t m, std::int64_t n, std::int64_t k, float alpha, float beta);

// Whether bf16 products run natively here (oneDNN on and the CPU has bf16 instructions).
bool onednn_bf16_native();

// "oneDNN <version>", or empty where oneDNN is off (TIDAL_CPU_GEMM=openblas) or not built in.
std::string onednn_description();

}  // namespace tidal::ops::cpu
