#include "memory/chunk_manager.h"

#include "ops/cast.h"
#include "ops/residual.h"

namespace tidal::memory {
namespace {

void count_users(nn::Module& m, std::map<const nn::Parameter*, int>& users) {
  for (nn::Parameter* p : m.used_parameters()) ++users[p];
  for (auto& [name, child] : m.children()) count_users(*child, users);
}

}  // namespace

const char* chunk_kind_name(ChunkKind k) {
  switch (k) {
    case ChunkKind::param: return "param";
    case ChunkKind::master: return "param fp32";
    case ChunkKind::momentum: return "momentum";
    case ChunkKind::variance: return "variance";
    case ChunkKind::grad: return "grad fp32";
  }
  return "?";
}

ChunkManager::ChunkManager(nn::Module& model, std::vector<nn::Parameter*> params, const ChunkOptions& options,
                           Allocator& device, Allocator& host)
    : params_(std::move(params)), options_(options) {
  std::vector<std::int64_t> numels;
  for (const nn::Parameter* p : params_) {
    TIDAL_ASSERT(p->data.defined() && p->data.dtype() == DType::f32, "chunks take materialized fp32 parameters ({})",
                 p->name);
    numels.push_back(p->data.numel());
  }
  const std::int64_t size = options_.chunk_elements ? options_.chunk_elements : search_chunk_size(numels);
  layout_ = layout_chunks(numels, size);
  auto make = [&](ChunkKind kind, DType dtype, Allocator& alloc) {
    std::vector<Tensor>& chunks = lists_[kind];
    for (int c = 0; c < layout_.chunks; ++c) chunks.push_back(Tensor::zeros({layout_.chunk_elements}, dtype, alloc));
  };
  make(ChunkKind::param, options_.compute_dtype, device);
  make(ChunkKind::master, DType::f32, host);
  make(ChunkKind::momentum, DType::f32, host);
  make(ChunkKind::variance, DType::f32, host);
  if (options_.accumulate) make(ChunkKind::grad, DType::f32, host);

  std::map<const nn::Parameter*, int> users;
  count_users(model, users);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    nn::Parameter* p = params_[i];
    index_[p] = i;
    tracked_.push_back({.param = p, .users = users[p]});
    Tensor master = slot(ChunkKind::master, *p), param = slot(ChunkKind::param, *p);
    master.copy_from(p->data);
    ops::cast(param, p->data);
    p->data = p->grad = Tensor();  // from now on the chunks hold them (access hands out views)
  }
}

ChunkManager::~ChunkManager() = default;

ChunkManager::Tracked& ChunkManager::tracked(const nn::Parameter& p) {
  const auto it = index_.find(&p);
  TIDAL_ASSERT(it != index_.end(), "parameter {} is not managed in chunks", p.name);
  return tracked_[it->second];
}

const ChunkManager::Tracked& ChunkManager::tracked(const nn::Parameter& p) const {
  return const_cast<ChunkManager*>(this)->tracked(p);
}

Tensor ChunkManager::slot(ChunkKind kind, const nn::Parameter& p) const {
  const auto it = lists_.find(kind);
  TIDAL_ASSERT(it != lists_.end(), "no {} chunk list", chunk_kind_name(kind));
  const auto i = index_.find(&p);
  TIDAL_ASSERT(i != index_.end(), "parameter {} is not managed in chunks", p.name);
  const ChunkLayout::Place& place = layout_.places[i->second];
  const Shape& shape = p.shape;
  return it->second[std::size_t(place.chunk)].slice(0, place.offset, place.offset + shape.numel()).reshape(shape);
}

Tensor ChunkManager::gradient(const nn::Parameter& p) const {
  return slot(options_.accumulate ? ChunkKind::grad : ChunkKind::param, p);
}

TensorState ChunkManager::state(const nn::Parameter& p) const { return tracked(p).state; }

Placement ChunkManager::placement(int chunk) const {
  std::vector<TensorState> states;
  for (std::size_t i = 0; i < tracked_.size(); ++i)
    if (layout_.places[i].chunk == chunk) states.push_back(tracked_[i].state);
  return placement_of(states);
}

void ChunkManager::set_state(Tracked& t, TensorState to) {
  TIDAL_ASSERT(can_transition(t.state, to), "{}: no transition from {} to {}", t.param->name, state_name(t.state),
               state_name(to));
  t.state = to;
}

void ChunkManager::access(nn::Parameter& p, bool backward) {  // patrickstar-v2 Alg. 1
  Tracked& t = tracked(p);
  const TensorState old = t.state;
  set_state(t, TensorState::compute);
  p.data = slot(ChunkKind::param, p);
  if (old == TensorState::free) p.data.zero_();
  if (backward && !p.grad.defined()) p.grad = Tensor::zeros(p.shape, p.data.dtype());
}

void ChunkManager::release(nn::Parameter& p, TensorState target) {  // patrickstar-v2 Alg. 2
  set_state(tracked(p), target);
  p.data = Tensor();
}

void ChunkManager::store_gradient(Tracked& t) {
  nn::Parameter& p = *t.param;
  if (options_.accumulate) {
    Tensor sum = slot(ChunkKind::grad, p), grad = p.grad;
    if (grad.dtype() != DType::f32) {
      grad = Tensor::empty(p.shape);
      ops::cast(grad, p.grad);
    }
    ops::accumulate(sum, grad);
  } else {
    // The parameter is not needed again before the optimizer step: its slot takes the gradient
    // (Fig. 5).
    Tensor param = slot(ChunkKind::param, p);
    ops::cast(param, p.grad);
  }
  p.grad = Tensor();
  release(p, TensorState::hold_after_bwd);
}

void ChunkManager::before_forward(nn::Module& m) {
  for (nn::Parameter* p : m.used_parameters())
    if (index_.count(p)) access(*p, false);
}

void ChunkManager::after_forward(nn::Module& m) {
  for (nn::Parameter* p : m.used_parameters())
    if (index_.count(p)) release(*p, TensorState::hold_after_fwd);
}

void ChunkManager::before_backward(nn::Module& m) {
  for (nn::Parameter* p : m.used_parameters())
    if (index_.count(p)) access(*p, true);
}

void ChunkManager::after_backward(nn::Module& m) {
  for (nn::Parameter* p : m.used_parameters()) {
    if (!index_.count(p)) continue;
    Tracked& t = tracked(*p);
    TIDAL_ASSERT(t.backward_left > 0, "{}: more backward uses than users (end_forward not called?)", p->name);
    if (--t.backward_left == 0) store_gradient(t);
    else release(*p, TensorState::hold);  // another user's backward adds to its gradient
  }
}

void ChunkManager::end_forward() {
  for (Tracked& t : tracked_) {
    if (t.state == TensorState::hold_after_fwd) set_state(t, TensorState::hold);
    t.backward_left = t.users;
  }
}

void ChunkManager::end_backward() {
  for (Tracked& t : tracked_) {
    if (t.state == TensorState::hold_after_bwd) continue;
    // Not used in this pass: a zero gradient (nothing to add with accumulation).
    TIDAL_ASSERT(!t.param->grad.defined(), "{}: backward ended with its gradient incomplete", t.param->name);
    access(*t.param, false);
    if (!options_.accumulate) t.param->data.zero_();
    release(*t.param, TensorState::hold_after_bwd);
  }
}

void ChunkManager::zero_grad() {
  if (options_.accumulate)
    for (Tensor& chunk : list(ChunkKind::grad)) chunk.zero_();
}

void ChunkManager::adamw_step(const ops::AdamWOptions& options, std::int64_t step) {
  for (Tracked& t : tracked_) {
    nn::Parameter& p = *t.param;
    set_state(t, TensorState::compute);  // HOLD_AFTER_BWD: the gradient is complete
    Tensor master = slot(ChunkKind::master, p), m = slot(ChunkKind::momentum, p), v = slot(ChunkKind::variance, p);
    ops::adamw_step(master, gradient(p), m, v, options, step);
    Tensor param = slot(ChunkKind::param, p);
    ops::cast(param, master);  // the gradient it held is spent
    set_state(t, TensorState::hold);
  }
}

std::int64_t ChunkManager::model_data_bytes() const {
  std::int64_t bytes = 0;
  for (const auto& [kind, chunks] : lists_)
    for (const Tensor& c : chunks) bytes += std::int64_t(c.nbytes());
  return bytes;
}

}  // namespace tidal::memory
