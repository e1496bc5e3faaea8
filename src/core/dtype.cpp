#include "core/dtype.h"

#include "core/error.h"

namespace tidal {

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i32: return 4;
    case DType::u8: return 1;
  }
  TIDAL_ASSERT(false, "unknown dtype {}", int(t));
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::u8: return "u8";
  }
  TIDAL_ASSERT(false, "unknown dtype {}", int(t));
}

}  // namespace tidal
