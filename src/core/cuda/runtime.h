// CUDA runtime basics for every CUDA file: the status macros (the call, file and line in the
// message, STYLE.md rule 6), the process's three streams, and launch sizing.
//
// Streams: every op runs on the compute stream, so ops are ordered among themselves without
// synchronisation and a tensor freed on it may be reused by the next op at once. Chunk moves
// between host and device run on the copy stream so they overlap compute; events order the two.
// The staged collectives' copies out run on the staging stream, apart from chunk traffic (a
// gradient bucket's copy need not wait behind a prefetch). All are non-blocking streams, created
// on first use on the current device.
#pragma once

#include "core/error.h"

#include <cuda_runtime.h>

#include <cstdint>

#define TIDAL_CUDA_CALL(call)                                                                        \
  do {                                                                                               \
    const cudaError_t status_ = (call);                                                              \
    TIDAL_CHECK(status_ == cudaSuccess, "{} failed at {}:{}: {}", #call, __FILE__, __LINE__,         \
                cudaGetErrorString(status_));                                                        \
  } while (0)

// After a kernel launch: a bad configuration or an earlier asynchronous fault surfaces here.
#define TIDAL_CUDA_CHECK_LAUNCH(kernel_name)                                                         \
  do {                                                                                               \
    const cudaError_t status_ = cudaGetLastError();                                                  \
    TIDAL_CHECK(status_ == cudaSuccess, "launch of {} failed at {}:{}: {}", kernel_name, __FILE__,   \
                __LINE__, cudaGetErrorString(status_));                                              \
  } while (0)

namespace tidal::cuda {

cudaStream_t compute_stream();
cudaStream_t copy_stream();
cudaStream_t staging_stream();

// Blocks the host until everything queued on the compute stream has run.
void synchronize();

// Blocks for `n` elements at `threads` per block, at most `cap` blocks (kernels then stride).
inline unsigned blocks_for(std::int64_t n, int threads, std::int64_t cap = 65535LL * 16) {
  const std::int64_t b = (n + threads - 1) / threads;
  return unsigned(b < 1 ? 1 : (b > cap ? cap : b));
}

}  // namespace tidal::cuda
