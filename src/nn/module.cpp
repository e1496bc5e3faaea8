#include "nn/module.h"

#include "core/profile.h"
#include "nn/runner.h"
#include "ops/cast.h"
#include "ops/residual.h"

#include <omp.h>

#include <exception>
#include <mutex>

namespace tidal::nn {
namespace {

// m and every module below it, parents first.
void add_tree(Module& m, std::vector<Module*>& out) {
  out.push_back(&m);
  for (const auto& [name, child] : m.children()) add_tree(*child, out);
}

// run(i) for i < n, each call on one of the threads, taken in order as threads come free; the
// step's temporaries go where this thread's go, and a profile counts each thread's share. The
// first exception is rethrown here, after all.
void on_threads(std::size_t n, const std::function<void(std::size_t)>& run) {
  Allocator& temporaries = default_allocator();
  std::exception_ptr error;
  std::mutex error_lock;
  const ConcurrentProfile profile;
#pragma omp parallel
  {
    const ScopedDefaultAllocator same(temporaries);
    const ConcurrentProfile::Share share(omp_get_num_threads());
#pragma omp for schedule(dynamic, 1)
    for (std::size_t i = 0; i < n; ++i) {
      try {
        run(i);
      } catch (...) {
        const std::lock_guard lock(error_lock);
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace

Tensor gradient_or_scratch(Parameter& p, const Context& ctx) {
  if (!p.frozen) return p.grad;
  Tensor scratch = ctx.empty(p.shape, p.data.dtype());
  scratch.zero_();
  return scratch;
}

std::vector<Parameter*> Module::parameters() {
  std::vector<Parameter*> out;
  for (auto& p : params_) out.push_back(p.get());
  for (auto& [name, child] : children_) {
    auto sub = child->parameters();
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

std::vector<Parameter*> Module::used_parameters() {
  std::vector<Parameter*> out;
  for (auto& p : params_) out.push_back(p.get());
  return out;
}

void Module::collect_used_parameters(std::set<Parameter*>& out) {
  for (Parameter* p : used_parameters()) out.insert(p);
  for (auto& [name, child] : children_) child->collect_used_parameters(out);
}

void Module::count_parameter_users(std::map<Parameter*, int>& users) {
  for (Parameter* p : used_parameters()) ++users[p];
  for (auto& [name, child] : children_) child->count_parameter_users(users);
}

void Module::assign_names(const std::string& path) {
  path_ = path;
  const std::string prefix = path.empty() ? "" : path + ".";
  for (auto& p : params_) p->name = prefix + p->local_name;
  // A child registered under "" is transparent: its parameters are named as if they were ours
  // (GPT-2's flat "wte.weight", "ln_f.weight" while the embedding is its own module).
  for (auto& [name, child] : children_) child->assign_names(name.empty() ? path : prefix + name);
}

void Module::attach_adapter(std::unique_ptr<Module> adapter) {
  TIDAL_ASSERT(adapter_ == nullptr, "{} has an adapter already", path_);
  adapter_ = &add_module("lora", std::move(adapter));
  adapter_->assign_names(path_ + ".lora");
}

Parameter& Module::add_parameter(std::string local_name, Shape shape, ParameterInit init) {
  auto p = std::make_unique<Parameter>();
  p->local_name = std::move(local_name);
  p->shape = shape;
  p->init = init;
  params_.push_back(std::move(p));
  return *params_.back();
}

Tensor Context::as(const Tensor& t, DType dtype) const {
  if (t.dtype() == dtype) return t;
  Tensor out = empty(t.shape(), dtype);
  ops::cast(out, t);
  return out;
}

Context& Context::child(std::size_t slot) {
  if (children_.size() <= slot) children_.resize(slot + 1);
  if (!children_[slot]) children_[slot] = std::make_unique<Context>(*state_);
  return *children_[slot];
}

Context& Context::placed_child(std::size_t slot, Allocator& activations, Batch batch) {
  if (children_.size() <= slot) children_.resize(slot + 1);
  auto c = std::make_unique<Context>(*state_);
  c->placement_ = std::make_unique<Placement>(Placement{.state = *state_, .batch = std::move(batch)});
  c->placement_->state.activations = &activations;
  if (state_->batch) c->placement_->state.batch = &c->placement_->batch;
  c->state_ = &c->placement_->state;
  children_[slot] = std::move(c);
  return *children_[slot];
}

Context& Context::part_child(std::size_t slot, bool more_parts) {
  if (children_.size() <= slot) children_.resize(slot + 1);
  auto c = std::make_unique<Context>(*state_);
  c->placement_ = std::make_unique<Placement>(Placement{.state = *state_, .batch = {}});
  c->placement_->state.more_parts = more_parts;
  c->state_ = &c->placement_->state;
  children_[slot] = std::move(c);
  return *children_[slot];
}

Batch copy_batch(const Batch& b, Allocator& memory) {
  auto copied = [&](const Tensor& t) { return t.defined() ? t.clone(memory) : Tensor(); };
  return {.tokens = copied(b.tokens), .token_types = copied(b.token_types), .attn_mask = copied(b.attn_mask),
          .images = copied(b.images), .targets = copied(b.targets), .positions = copied(b.positions)};
}

Tensor Context::forward(Module& m, const Tensor& x, std::size_t slot) {
  Tensor y = state_->runner->forward(m, x, child(slot));
  if (!state_->training) child(slot).clear();  // forward alone (evaluation): no backward reads what it kept
  return y;
}

Tensor Context::backward(Module& m, const Tensor& dy, std::size_t slot) {
  return state_->runner->backward(m, dy, child(slot));
}

namespace {

// The child contexts in `slots`, all made before any thread reads them.
std::vector<Context*> children_in(Context& ctx, std::span<const std::size_t> slots) {
  std::vector<Context*> out;
  for (std::size_t s : slots) out.push_back(&ctx.child(s));
  return out;
}

}  // namespace

void Context::forward_concurrently(std::span<Module* const> ms, std::span<const Tensor> xs,
                                   std::span<const std::size_t> slots, const Done& done) {
  const std::vector<Context*> contexts = children_in(*this, slots);
  state_->runner->forward_concurrently(ms, xs, contexts, done);
  if (!state_->training)
    for (Context* c : contexts) c->clear();
}

void Context::backward_concurrently(std::span<Module* const> ms, std::span<const Tensor> dys,
                                    std::span<const std::size_t> slots, const Done& done) {
  state_->runner->backward_concurrently(ms, dys, children_in(*this, slots), done);
}

Context& Context::adapter_child() {
  if (!adapter_) adapter_ = std::make_unique<Context>(*state_);
  return *adapter_;
}

void Context::clear() {
  saved.clear();
  kept.reset();
  children_.clear();
  adapter_.reset();
  forgotten_.clear();
}

std::size_t Context::forget(const Tensor& t) {
  const auto same = [&](const Tensor& s) {
    return s.defined() && s.raw() == t.raw() && s.dtype() == t.dtype() && s.shape() == t.shape() &&
           s.strides() == t.strides();
  };
  forgotten_.clear();
  const auto search = [&](auto& self, Context& c) -> void {
    const auto visit = [&](Context& child) {
      for (Tensor& s : child.saved)
        if (same(s)) {
          s = Tensor();
          forgotten_.push_back(&s);
        }
      self(self, child);
    };
    for (auto& child : c.children_)
      if (child) visit(*child);
    if (c.adapter_) visit(*c.adapter_);
  };
  search(search, *this);
  return forgotten_.size();
}

void Context::remember(const Tensor& t) {
  TIDAL_ASSERT(!forgotten_.empty(), "remember() without a tensor forgotten");
  for (Tensor* s : forgotten_) *s = t;
  forgotten_.clear();
}

Tensor Runner::forward(Module& m, const Tensor& x, Context& ctx) {
  Tensor y = run_forward(m, x, ctx);
  if (Module* adapter = m.adapter()) {
    // The base's output gains the adapter's term (its own context; x is unchanged by the base).
    const Tensor term = run_forward(*adapter, x, ctx.adapter_child());
    ops::accumulate(y, term);
  }
  return y;
}

Tensor Runner::backward(Module& m, const Tensor& dy, Context& ctx) {
  // The adapter first: the base's backward may write its input gradient over dy.
  Tensor dx_adapter;
  if (Module* adapter = m.adapter()) dx_adapter = run_backward(*adapter, dy, ctx.adapter_child());
  Tensor dx = run_backward(m, dy, ctx);
  if (dx_adapter.defined()) ops::accumulate(dx, dx_adapter);
  return dx;
}

void Runner::forward_concurrently(std::span<Module* const> ms, std::span<const Tensor> xs,
                                  std::span<Context* const> ctxs, const Done& done) {
  run_concurrently(ms, xs, ctxs, done, false);
}

void Runner::backward_concurrently(std::span<Module* const> ms, std::span<const Tensor> dys,
                                   std::span<Context* const> ctxs, const Done& done) {
  for (const Context* c : ctxs)
    TIDAL_ASSERT(c->state().weight_gradients == nullptr && !c->state().more_parts,
                 "a concurrent backward under a zero-bubble B or over blocks of rows");
  run_concurrently(ms, dys, ctxs, done, true);
}

void Runner::run_concurrently(std::span<Module* const> ms, std::span<const Tensor> ins,
                              std::span<Context* const> ctxs, const Done& done, bool backward) {
  TIDAL_ASSERT(ms.size() == ins.size() && ms.size() == ctxs.size() && !hooks_held_,
               "{} modules, {} inputs, {} contexts (or a concurrent run inside another)", ms.size(), ins.size(),
               ctxs.size());
  std::vector<Module*> trees;
  for (Module* m : ms) add_tree(*m, trees);
  for (Module* m : trees)
    for (auto* h : hooks_) backward ? h->before_backward(*m) : h->before_forward(*m);
  hooks_held_ = true;
  try {
    on_threads(ms.size(), [&](std::size_t i) {
      done(i, backward ? this->backward(*ms[i], ins[i], *ctxs[i]) : forward(*ms[i], ins[i], *ctxs[i]));
    });
  } catch (...) {
    hooks_held_ = false;
    throw;
  }
  hooks_held_ = false;
  for (auto m = trees.rbegin(); m != trees.rend(); ++m)
    for (auto* h : hooks_) backward ? h->after_backward(**m) : h->after_forward(**m);
}

Tensor Runner::run_forward(Module& m, const Tensor& x, Context& ctx) {
  const ModuleTimer timer(typeid(m));
  if (hooks_held_) return m.forward(x, ctx);
  for (auto* h : hooks_) h->before_forward(m);
  Tensor y = m.forward(x, ctx);
  for (auto* h : hooks_) h->after_forward(m);
  return y;
}

Tensor Runner::run_backward(Module& m, const Tensor& dy, Context& ctx) {
  const ModuleTimer timer(typeid(m));
  if (hooks_held_) return m.backward(dy, ctx);
  for (auto* h : hooks_) h->before_backward(m);
  WeightGradients* later = ctx.state().weight_gradients;
  const std::size_t mark = later ? later->products.size() : 0;  // a parent's own products come before
  Tensor dx = m.backward(dy, ctx);
  if (later && later->products.size() > mark) {  // m left weight gradients for the W pass
    std::vector<WeightGradients::Product> products(std::make_move_iterator(later->products.begin() + std::ptrdiff_t(mark)),
                                                   std::make_move_iterator(later->products.end()));
    later->products.resize(mark);
    std::vector<Parameter*> deferred;
    for (const WeightGradients::Product& p : products) deferred.push_back(p.param);
    for (auto* h : hooks_) h->after_input_gradient(m, deferred);
    later->passes.push_back([this, &m, products = std::move(products), deferred = std::move(deferred)] {
      const ModuleTimer timer(typeid(m));
      for (auto* h : hooks_) h->before_weight_gradient(m, deferred);
      for (const WeightGradients::Product& p : products) p.run();
      for (auto* h : hooks_) h->after_weight_gradient(m, deferred);
    });
    return dx;
  }
  for (auto* h : hooks_) {
    if (ctx.state().more_parts) h->after_backward_part(m);
    else h->after_backward(m);
  }
  return dx;
}

}  // namespace tidal::nn
