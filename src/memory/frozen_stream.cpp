#include "memory/frozen_stream.h"

#include "core/error.h"

namespace tidal::memory {
namespace {

// The bytes of t, written to the file at `at` (advanced past them).
void write(DiskStore& file, const Tensor& t, std::int64_t& at) {
  const Tensor host = t.device().is_cpu() && t.is_contiguous() ? t : t.clone(host_allocator());
  file.write(0, std::size_t(at), host.nbytes(), host.raw());
  at += std::int64_t(host.nbytes());
}

Tensor placeholder(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), meta_allocator()); }

}  // namespace

FrozenBaseStream::FrozenBaseStream(std::span<nn::Parameter* const> frozen) {
  for (nn::Parameter* p : frozen) {
    TIDAL_ASSERT(p->frozen && (p->data.defined() || p->nf4), "{}: a streamed base parameter must be frozen and held",
                 p->name);
    held_[p] = {.data = p->data, .nf4 = p->nf4};
  }
}

FrozenBaseStream::FrozenBaseStream(const std::string& dir, int rank, std::int64_t bytes)
    : file_(std::make_unique<DiskStore>(dir, rank, std::size_t(std::max<std::int64_t>(bytes, 1)), 1)) {}

FrozenBaseStream::~FrozenBaseStream() {
  for (auto& [p, h] : held_) {  // the copies between uses back, whatever a failed step left fetched
    p->data = h.data;
    p->nf4 = h.nf4;
  }
}

void FrozenBaseStream::store(nn::Parameter& p) {
  TIDAL_ASSERT(file_ && p.frozen && !held_.count(&p) && (p.data.defined() || p.nf4),
               "{}: stored once, frozen and held, in a stream from disk", p.name);
  Held h{.data = {}, .nf4 = nullptr, .at = stored_};
  if (p.nf4) {
    const ops::Nf4Weight& q = *p.nf4;
    for (const Tensor* t : {&q.codes, &q.absmax_codes, &q.absmax_scales}) write(*file_, *t, stored_);
    auto shaped = std::make_shared<ops::Nf4Weight>(ops::nf4_shaped(q.shape, meta_allocator()));
    shaped->absmax_offset = q.absmax_offset;
    h.nf4 = std::move(shaped);
  } else {
    write(*file_, p.data, stored_);
    h.data = placeholder(p.data);
  }
  p.data = h.data;
  p.nf4 = h.nf4;
  held_[&p] = std::move(h);
}

Tensor FrozenBaseStream::read(const Tensor& like, std::int64_t& at) {
  Tensor t = Tensor::empty(like.shape(), like.dtype(), default_allocator());
  if (t.device().is_cpu()) {
    file_->read(0, std::size_t(at), t.nbytes(), t.raw());
  } else if (!t.device().is_meta()) {
    Tensor host = Tensor::empty(like.shape(), like.dtype(), host_allocator());
    file_->read(0, std::size_t(at), host.nbytes(), host.raw());
    t.copy_from(host);
  }
  at += std::int64_t(t.nbytes());
  return t;
}

void FrozenBaseStream::fetch(nn::Module& m) {
  for (nn::Parameter* p : m.used_parameters()) {
    const auto it = held_.find(p);
    if (it == held_.end() || it->second.runs++ > 0) continue;
    Held& h = it->second;
    if (h.nf4) {
      if (file_) {
        auto q = std::make_shared<ops::Nf4Weight>();
        q->shape = h.nf4->shape;
        q->absmax_offset = h.nf4->absmax_offset;
        std::int64_t at = h.at;
        q->codes = read(h.nf4->codes, at);
        q->absmax_codes = read(h.nf4->absmax_codes, at);
        q->absmax_scales = read(h.nf4->absmax_scales, at);
        p->nf4 = std::move(q);
      } else {
        p->nf4 = std::make_shared<const ops::Nf4Weight>(h.nf4->to(default_allocator()));
      }
      streamed_bytes_ += h.nf4->bytes();
    } else {
      std::int64_t at = h.at;
      p->data = file_ ? read(h.data, at) : h.data.clone(default_allocator());
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
