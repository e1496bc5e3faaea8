// Backend dispatch for op families: `ops::fn(...)` runs `ops::cpu::fn` or `ops::cuda::fn` by
// the device of the tensor named first. The CUDA families land with the CUDA backend issue;
// until a family has a CUDA implementation, a device tensor is a clear error.
#pragma once

#include "core/error.h"

#define TIDAL_OPS_DISPATCH(tensor, fn, ...)                                                      \
  do {                                                                                           \
    TIDAL_CHECK(!(tensor).device().is_cuda(),                                                    \
                "op {} has no CUDA implementation in this build (tensor on {})", #fn,            \
                (tensor).device().str());                                                        \
    ::tidal::ops::cpu::fn(__VA_ARGS__);                                                          \
  } while (0)
