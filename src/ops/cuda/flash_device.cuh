// The hardware-facing pieces of the flash-attention kernels (ops/cuda/flash_simt.cuh and
// ops/cuda/flash_tensor_core.cuh), kept in this one file so that everything above them is plain
// CUDA C++: the block's dynamic shared memory, asynchronous global -> shared copies (cp.async,
// sm_80), ldmatrix, and the m16n8k16 tensor-core product with fp32 accumulators.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"), for
// lane = 4 g + t (g = lane / 4, t = lane % 4):
//   A 16 x 16, row-major, 4 registers of 2 elements: {row g, cols 2t, 2t+1}, {row g+8, cols 2t, 2t+1},
//     {row g, cols 8+2t, 8+2t+1}, {row g+8, cols 8+2t, 8+2t+1}
//   B 16 x 8 (k x n), 2 registers: {k 2t, 2t+1; n g}, {k 8+2t, 8+2t+1; n g}
//   C 16 x 8 fp32, 4 floats: row g cols 2t, 2t+1, then row g+8 cols 2t, 2t+1
// The lower column (or k) of a pair sits in the register's low half. So two adjacent 16 x 8 C
// tiles, rounded and paired, are the A fragment of the 16 x 16 tile they form: that is how the
// probabilities and score gradients feed the next product without leaving registers.
#pragma once

#include "ops/cuda/common.cuh"

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace tidal::ops::cuda {
namespace {

// The block's dynamic shared memory (its size is set at launch), 16-byte aligned for
// copy_async_16 and ldmatrix.
__device__ __forceinline__ unsigned char* flash_shared_memory() {
  extern __shared__ __align__(16) unsigned char flash_shared[];
  return flash_shared;
}

__device__ __forceinline__ std::uint32_t shared_address(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes from global to shared memory, bypassing registers; `valid` false writes 16 zero bytes
// and reads nothing (rows past the end of the sequence). Lands after copy_async_wait.
__device__ __forceinline__ void copy_async_16(void* shared, const void* global, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(shared)), "l"(global),
               "r"(valid ? 16 : 0)
               : "memory");
}

// Closes the group of copies issued since the last commit.
__device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void copy_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Four 8 x 8 matrices of 16-bit elements: lanes 8m .. 8m+7 give the addresses of matrix m's rows
// (16 contiguous bytes each), and register m of lane 4 g + t receives matrix m's elements
// (row g, cols 2t, 2t+1) - or with kTranspose (rows 2t, 2t+1, col g), the transposed fragment.
template <bool kTranspose>
__device__ __forceinline__ void load_matrix_x4(std::uint32_t (&r)[4], const void* row) {
  if constexpr (kTranspose)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(row)));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(row)));
}

// d += a b for a 16 x 16 A fragment and a 16 x 8 B fragment {b0, b1} of T (bf16 or fp16), in fp32.
template <class T>
__device__ __forceinline__ void mma_16x8x16(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                            std::uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two fp32 values rounded to T (nearest even, as store<T>), `lo` in the low half.
template <class T>
__device__ __forceinline__ std::uint32_t pack_pair(float lo, float hi) {
  std::uint32_t bits;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    memcpy(&bits, &v, sizeof bits);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    memcpy(&bits, &v, sizeof bits);
  }
  return bits;
}

// The A fragment of the 16 x 16 tile formed by two adjacent 16 x 8 C tiles (columns 0-7 in
// `left`, 8-15 in `right`), rounded to T.
template <class T>
__device__ __forceinline__ void accumulators_as_a(std::uint32_t (&a)[4], const float (&left)[4],
                                                  const float (&right)[4]) {
  a[0] = pack_pair<T>(left[0], left[1]);
  a[1] = pack_pair<T>(left[2], left[3]);
  a[2] = pack_pair<T>(right[0], right[1]);
  a[3] = pack_pair<T>(right[2], right[3]);
}

}  // namespace
}  // namespace tidal::ops::cuda
