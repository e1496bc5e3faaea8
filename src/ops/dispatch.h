// Backend dispatch for op families: `ops::fn(...)` runs `ops::cpu::fn` or `ops::cuda::fn` by
// the device of the tensor named first, or `ops::meta::fn` on a meta tensor (core/device.h: the
// op's cost recorded, nothing computed). A build without CUDA has only the CPU backend, and a GPU
// tensor there is a clear error. Each call is timed for train.profile (core/profile.h); its op
// family is found from the name at compile time.
#pragma once

#include "core/error.h"
#include "core/profile.h"

#if TIDAL_CUDA
#define TIDAL_OPS_DISPATCH(tensor, fn, ...)                                                      \
  do {                                                                                           \
    constexpr ::tidal::OpFamily tidal_op_family = ::tidal::op_family_of(#fn);                   \
    const ::tidal::OpTimer tidal_op_timer(tidal_op_family);                                      \
    if ((tensor).device().is_meta()) {                                                           \
      ::tidal::ops::meta::fn(__VA_ARGS__);                                                       \
    } else if ((tensor).device().is_cuda()) {                                                    \
      ::tidal::ops::cuda::fn(__VA_ARGS__);                                                       \
    } else {                                                                                     \
      ::tidal::ops::cpu::fn(__VA_ARGS__);                                                        \
    }                                                                                            \
  } while (0)
#else
#define TIDAL_OPS_DISPATCH(tensor, fn, ...)                                                      \
  do {                                                                                           \
    constexpr ::tidal::OpFamily tidal_op_family = ::tidal::op_family_of(#fn);                   \
    const ::tidal::OpTimer tidal_op_timer(tidal_op_family);                                      \
    TIDAL_CHECK(!(tensor).device().is_cuda(),                                                    \
                "op {} got a tensor on {}, and this build has no CUDA backend (rebuild with nvcc "  \
                "installed: cmake -DTIDAL_CUDA=ON)",                                             \
                #fn, (tensor).device().str());                                                   \
    if ((tensor).device().is_meta()) {                                                           \
      ::tidal::ops::meta::fn(__VA_ARGS__);                                                       \
    } else {                                                                                     \
      ::tidal::ops::cpu::fn(__VA_ARGS__);                                                        \
    }                                                                                            \
  } while (0)
#endif
