#include "memory/frozen_stream.h"

#include "core/error.h"

namespace tidal::memory {

FrozenBaseStream::FrozenBaseStream(std::span<nn::Parameter* const> frozen) {
  for (nn::Parameter* p : frozen) {
    TIDAL_ASSERT(p->frozen && (p->data.defined() || p->nf4), "{}: a streamed base parameter must be frozen and held",
                 p->name);
    held_[p] = {.data = p->data, .nf4 = p->nf4};
  }
}

FrozenBaseStream::~FrozenBaseStream() {
  for (auto& [p, h] : held_) {  // the host copies back, whatever a failed step left fetched
    p->data = h.data;
    p->nf4 = h.nf4;
  }
}

void FrozenBaseStream::fetch(nn::Module& m) {
  for (nn::Parameter* p : m.used_parameters()) {
    const auto it = held_.find(p);
    if (it == held_.end() || it->second.runs++ > 0) continue;
    Held& h = it->second;
    if (h.nf4) {
      p->nf4 = std::make_shared<const ops::Nf4Weight>(h.nf4->to(default_allocator()));
      streamed_bytes_ += h.nf4->bytes();
    } else {
      p->data = h.data.clone(default_allocator());
      streamed_bytes_ += std::int64_t(h.data.nbytes());
    }
  }
}

void FrozenBaseStream::release(nn::Module& m) {
  for (nn::Parameter* p : m.used_parameters()) {
    const auto it = held_.find(p);
    if (it == held_.end()) continue;
    Held& h = it->second;
    TIDAL_ASSERT(h.runs > 0, "{}: released more often than fetched", p->name);
    if (--h.runs > 0) continue;
    p->data = h.data;
    p->nf4 = h.nf4;
  }
}

std::int64_t FrozenBaseStream::take_streamed_bytes() {
  const std::int64_t out = streamed_bytes_;
  streamed_bytes_ = 0;
  return out;
}

}  // namespace tidal::memory
