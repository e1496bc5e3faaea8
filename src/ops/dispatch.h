// Backend dispatch for op families: `ops::fn(...)` runs `ops::cpu::fn` or `ops::cuda::fn` by
// the device of the tensor named first. A build without CUDA has only the CPU backend, and a GPU
// tensor there is a clear error.
#pragma once

#include "core/error.h"

#if TIDAL_CUDA
#define TIDAL_OPS_DISPATCH(tensor, fn, ...)                                                      \
  do {                                                                                           \
    if ((tensor).device().is_cuda()) {                                                           \
      ::tidal::ops::cuda::fn(__VA_ARGS__);                                                       \
    } else {                                                                                     \
      ::tidal::ops::cpu::fn(__VA_ARGS__);                                                        \
    }                                                                                            \
  } while (0)
#else
#define TIDAL_OPS_DISPATCH(tensor, fn, ...)                                                      \
  do {                                                                                           \
    TIDAL_CHECK(!(tensor).device().is_cuda(),                                                    \
                "op {} got a tensor on {}, and this build has no CUDA backend (rebuild with nvcc "  \
                "installed: cmake -DTIDAL_CUDA=ON)",                                             \
                #fn, (tensor).device().str());                                                   \
    ::tidal::ops::cpu::fn(__VA_ARGS__);                                                          \
  } while (0)
#endif
