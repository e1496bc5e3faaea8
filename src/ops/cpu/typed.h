// Helpers shared by the CPU kernels: calling a kernel template with the storage type of a
// tensor, and argument checks.
#pragma once

#include "core/error.h"
#include "core/tensor.h"

#include <initializer_list>

namespace tidal::ops::cpu {

// f.template operator()<T>() with T = float, bf16 or f16 by `dtype`.
template <class F>
void with_float_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: f.template operator()<float>(); return;
    case DType::bf16: f.template operator()<bf16>(); return;
    case DType::f16: f.template operator()<f16>(); return;
    case DType::i32:
    case DType::u8: break;
  }
  TIDAL_ASSERT(false, "floating-point op called on {}", dtype_name(dtype));
}

// f.template operator()<T, G>() for a kernel reading values of `dtype` (T) and adding into a
// parameter's gradient of `grad` (G): T's own type, or fp32 where the gradient accumulates in its
// fp32 sum in place (memory/chunk_manager.h).
template <class F>
void with_gradient_types(DType dtype, DType grad, F&& f) {
  TIDAL_ASSERT(grad == dtype || grad == DType::f32, "a {} gradient of {} values", dtype_name(grad), dtype_name(dtype));
  with_float_type(dtype, [&]<class T>() {
    if (grad == DType::f32) f.template operator()<T, float>();
    else f.template operator()<T, T>();
  });
}

inline void expect_cpu_contiguous(const Tensor& t, const char* what) {
  TIDAL_ASSERT(t.defined() && t.device().is_cpu() && t.is_contiguous(), "{} must be a contiguous CPU tensor, got {}",
               what, t.defined() ? t.str() : "undefined");
}

inline void expect_cpu_contiguous(std::initializer_list<const Tensor*> ts, const char* what) {
  for (const Tensor* t : ts) expect_cpu_contiguous(*t, what);
}

inline void expect_same(const Tensor& a, const Tensor& b, const char* what) {
  TIDAL_ASSERT(a.shape() == b.shape() && a.dtype() == b.dtype(), "{}: {} vs {}", what, a.str(), b.str());
}

// Rows and width of a tensor seen as [N, C] with C the last dimension.
inline std::int64_t rows_of(const Tensor& t) { return t.ndim() == 0 ? 1 : t.numel() / t.dim(-1); }

}  // namespace tidal::ops::cpu
