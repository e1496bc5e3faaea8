// The meta backend (core/device.h): on meta tensors an op checks its shapes, makes the copies of
// its operands the backend it stands for would make (from the step's allocator, so they count),
// and tells the current Recorder the work that costs time - the products of GEMMs and attention
// - instead of computing. The planner (sim/) runs the real modules this way: what a step
// allocates, issues and multiplies is then what the code does, not a second description of it.
#pragma once

#include "core/dtype.h"
#include "core/shape.h"
#include "core/tensor.h"

#include <cstdint>

namespace tidal::ops::meta {

// The backend meta tensors stand for.
struct Backend {
  bool cpu = true;          // ops/cpu/ (else the CUDA kernels, which widen nothing)
  bool bf16_native = true;  // the CPU runs bf16 GEMM and attention operands as they are (oneDNN)
};

class Recorder {
 public:
  explicit Recorder(Backend backend) : backend(backend) {}
  virtual ~Recorder() = default;
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  const Backend backend;
  // `batch` products c [m, n] = a [m, k] b [k, n] with operands of `dtype`.
  virtual void gemm(DType dtype, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch) = 0;
  // Attention's products: `flops` over blocks of `keys` keys (a kernel call's).
  virtual void attention(DType dtype, double flops, std::int64_t keys) = 0;
  // Allocations between workspace(true) and workspace(false) are an op's own copies of its
  // operands: held while it runs, their time part of the op's.
  virtual void workspace(bool /*begin*/) {}
};

// The recorder of this thread (null: ops on meta tensors only check their shapes).
Recorder* recorder();
class ScopedRecorder {
 public:
  explicit ScopedRecorder(Recorder& r);
  ~ScopedRecorder();
  ScopedRecorder(const ScopedRecorder&) = delete;
  ScopedRecorder& operator=(const ScopedRecorder&) = delete;

 private:
  Recorder* previous_;
};

// An op's fp32 copy of an operand of `shape`, from the default allocator (the step's), marked
// as a workspace to the recorder.
Tensor workspace(const Shape& shape);
// Whether the CPU backend widens operands of these types to fp32 copies (ops/cpu/gemm.cpp,
// attention.cpp: bf16 runs natively on a CPU with bf16 instructions; fp16 never does).
bool cpu_widens(DType t);

}  // namespace tidal::ops::meta
