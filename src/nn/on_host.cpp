#include "nn/on_host.h"

#include "nn/runner.h"

namespace tidal::nn {
OnHost::OnHost(std::unique_ptr<Module> layer) : layer_(&add_module("", std::move(layer))) {}

Tensor OnHost::forward(const Tensor& x, Context& ctx) {
  const StepState& outer = ctx.state();
  Batch batch;
  if (outer.batch) batch = outer.activations->device().is_cuda() ? copy_batch(*outer.batch, host_allocator()) : *outer.batch;
  Allocator& host = host_memory_for(outer.activations->device());
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
    ScopedDefaultAllocator temporaries(host_memory_for(ctx.state().activations->device()));
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
