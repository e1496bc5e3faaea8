// cuBLASLt for the CUDA GEMM (ops/cuda/gemm.cu): the cuBLAS status macro, the process's one
// handle and one workspace, and a matmul plan (descriptors + the heuristic's algorithm) cached
// per problem, so a repeated GEMM queries no heuristic.
//
// Invariants: every matmul runs on the compute stream, so the single workspace is never used by
// two matmuls at once. Handle, workspace and plans live until the process exits (never destroyed:
// static destructors may run after the CUDA context is gone). One GPU per process.
//
// Determinism: cuBLAS gives bitwise-identical results run to run for a fixed algorithm on the
// same GPU model when the caller owns the workspace (cublasLtMatmul with a user workspace, as
// here). The heuristic is queried once per problem and its answer cached, so every call of one
// shape runs one algorithm. Split-K is restricted to the scheme that keeps partial sums in fp32 in
// the workspace and reduces them in a separate pass: fixed order (no atomics), and 16-bit outputs
// are rounded once, as on the CPU.
#pragma once

#include "core/error.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <compare>
#include <cstdint>

#define TIDAL_CUBLAS_CALL(call)                                                                      \
  do {                                                                                               \
    const cublasStatus_t status_ = (call);                                                           \
    TIDAL_CHECK(status_ == CUBLAS_STATUS_SUCCESS, "{} failed at {}:{}: {}", #call, __FILE__,         \
                __LINE__, cublasLtGetStatusString(status_));                                         \
  } while (0)

namespace tidal::ops::cuda {

// One row-major strided-batched GEMM, c[i] = alpha op(a[i]) op(b[i]) + beta c[i] for i < batch:
// a [m, k] ([k, m] with trans_a), b [k, n] ([n, k] with trans_b), c [m, n]; each contiguous, the
// batch matrices packed back to back. a and b share one element type, except in fp8 (e5m2
// gradients times e4m3 weights), whose GEMMs take a scale for each (`scaled`).
struct MatmulProblem {
  std::int64_t batch = 1, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  cudaDataType_t a_type = CUDA_R_32F, b_type = CUDA_R_32F;
  cudaDataType_t c_type = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;  // alpha and beta are fp32 in every case
  bool bias = false;  // c += bias [n] on every row, in the epilogue (bias of c's type)
  bool scaled = false;  // c = alpha * a_scale * b_scale * op(a) op(b) (+ beta c): fp8's per-tensor scales

  auto operator<=>(const MatmulProblem&) const = default;
};

// Queues the GEMM on the compute stream; c is read only when beta != 0. m, n, k >= 1. With
// p.bias, `bias` is added in the epilogue where cuBLASLt has an algorithm for that; returns false
// where it has none (then nothing ran: the caller runs the GEMM without the bias and adds it).
// With p.scaled, a_scale and b_scale point to one fp32 each in GPU memory (read when the GEMM runs).
bool lt_matmul(const MatmulProblem& p, const void* a, const void* b, void* c, float alpha, float beta,
               const void* bias = nullptr, const float* a_scale = nullptr, const float* b_scale = nullptr);

}  // namespace tidal::ops::cuda
