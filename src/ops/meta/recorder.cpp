#include "ops/meta/recorder.h"

namespace tidal::ops::meta {
namespace {
thread_local Recorder* current = nullptr;
}

Recorder* recorder() { return current; }

ScopedRecorder::ScopedRecorder(Recorder& r) : previous_(current) { current = &r; }
ScopedRecorder::~ScopedRecorder() { current = previous_; }

Tensor workspace(const Shape& shape) {
  Recorder* r = recorder();
  if (r) r->workspace(true);
  Tensor t = Tensor::empty(shape, DType::f32);
  if (r) r->workspace(false);
  return t;
}

bool cpu_widens(DType t) {
  const Recorder* r = recorder();
  if (r == nullptr || !r->backend.cpu || t == DType::f32) return false;
  return !(t == DType::bf16 && r->backend.bf16_native);
}

}  // namespace tidal::ops::meta
