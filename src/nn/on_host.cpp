#include "nn/on_host.h"

#include "nn/runner.h"

namespace tidal::nn {
namespace {
// The host's memory for a step whose activations live in `activations` (a planned step's on meta
// memory: its host side too).
Allocator& host_of(const Allocator& activations) {
  return activations.device().is_meta() ? meta_allocator() : host_allocator();
}
}  // namespace

OnHost::OnHost(std::unique_ptr<Module> layer) : layer_(&add_module("", std::move(layer))) {}

Tensor OnHost::forward(const Tensor& x, Context& ctx) {
  const StepState& outer = ctx.state();
  Batch batch;
  if (outer.batch) batch = outer.activations->device().is_cuda() ? copy_batch(*outer.batch, host_allocator()) : *outer.batch;
  Allocator& host = host_of(*outer.activations);
  Context& placed = ctx.placed_child(0, host, std::move(batch));
  Tensor y;
  {
    ScopedDefaultAllocator temporaries(host);
    y = outer.runner->forward(*layer_, on_host(x), placed);
  }
  Tensor out = ctx.empty(y.shape(), y.dtype());  // the one crossing to the device
  out.copy_from(y);
  return out;
}

Tensor OnHost::backward(const Tensor& dy, Context& ctx) {
  Tensor dx;
  {
    ScopedDefaultAllocator temporaries(host_of(*ctx.state().activations));
    dx = ctx.state().runner->backward(*layer_, on_host(dy), ctx.child(0));
  }
  if (!dx.defined() || !ctx.state().activations->device().is_cuda()) return dx;
  return dx.clone(*ctx.state().activations);
}

std::vector<Parameter*> parameters_on_host(Module& root) {
  if (dynamic_cast<OnHost*>(&root)) return root.parameters();
  std::vector<Parameter*> out;
  for (auto& [name, child] : root.children()) {
    std::vector<Parameter*> sub = parameters_on_host(*child);
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

}  // namespace tidal::nn
