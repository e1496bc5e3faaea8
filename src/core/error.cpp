#include "core/error.h"

namespace tidal::detail {

void throw_internal(const char* file, int line, const char* cond, const std::string& msg) {
  throw InternalError(fmt::format("internal error at {}:{}: `{}` failed: {}", file, line, cond, msg));
}

}  // namespace tidal::detail
