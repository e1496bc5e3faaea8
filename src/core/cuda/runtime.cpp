#include "core/cuda/runtime.h"

namespace tidal::cuda {
namespace {

cudaStream_t make_stream() {
  cudaStream_t s = nullptr;
  TIDAL_CUDA_CALL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

}  // namespace

// Never destroyed: ops may still be queued when static destructors run.
cudaStream_t compute_stream() {
  static cudaStream_t s = make_stream();
  return s;
}

cudaStream_t copy_stream() {
  static cudaStream_t s = make_stream();
  return s;
}

cudaStream_t staging_stream() {
  static cudaStream_t s = make_stream();
  return s;
}

void synchronize() { TIDAL_CUDA_CALL(cudaStreamSynchronize(compute_stream())); }

}  // namespace tidal::cuda
