#include "nn/activation_checkpoint.h"

#include "core/error.h"
#include "nn/context.h"

namespace tidal::nn {

ActivationCheckpoint::ActivationCheckpoint(std::unique_ptr<Module> inner, bool offload_to_host)
    : inner_(&add_module("", std::move(inner))), offload_to_host_(offload_to_host) {}

Tensor ActivationCheckpoint::forward(const Tensor& x, Context& ctx) {
  Tensor y = ctx.forward(*inner_, x, 0);
  ctx.child(0).clear();  // everything the inner backward would need is recomputed instead
  ctx.saved = {offload_to_host_ ? x.clone(host_memory_for(x.device())) : x};
  return y;
}

Tensor ActivationCheckpoint::backward(const Tensor& dy, Context& ctx) {
  TIDAL_ASSERT(ctx.saved.size() == 1, "{}: backward without its forward", path());
  const Tensor x = offload_to_host_ ? ctx.saved[0].clone(*ctx.state().activations) : ctx.saved[0];
  ctx.saved.clear();
  ctx.forward(*inner_, x, 0);  // recompute: same inputs, same dropout keys, same values
  Tensor dx = ctx.backward(*inner_, dy, 0);
  ctx.clear();
  return dx;
}

void Sequential::add(std::string name, std::unique_ptr<Module> m) { modules_.push_back(&add_module(std::move(name), std::move(m))); }

Tensor Sequential::forward(const Tensor& x, Context& ctx) {
  Tensor h = x;
  for (std::size_t i = 0; i < modules_.size(); ++i) h = ctx.forward(*modules_[i], h, i);
  return h;
}

Tensor Sequential::backward(const Tensor& dy, Context& ctx) {
  Tensor g = dy;
  for (std::size_t i = modules_.size(); i-- > 0;) g = ctx.backward(*modules_[i], g, i);
  return g;
}

std::vector<std::pair<std::string, std::unique_ptr<Module>>> checkpointed_blocks(
    std::vector<std::pair<std::string, std::unique_ptr<Module>>> blocks, const CheckpointPolicy& policy) {
  TIDAL_CHECK(policy.every >= 0, "activation checkpointing: runs of {} blocks make no sense", policy.every);
  if (policy.every == 0) return blocks;
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> layers;
  for (std::size_t i = 0; i < blocks.size(); i += std::size_t(policy.every)) {
    const std::size_t end = std::min(blocks.size(), i + std::size_t(policy.every));
    std::unique_ptr<Module> unit;
    if (end - i == 1) {
      unit = std::move(blocks[i].second);
      // A single block keeps its own name; the wrapper is transparent.
      layers.emplace_back(blocks[i].first, std::make_unique<ActivationCheckpoint>(std::move(unit), policy.offload_to_host));
      continue;
    }
    auto run = std::make_unique<Sequential>();
    for (std::size_t j = i; j < end; ++j) run->add(blocks[j].first, std::move(blocks[j].second));
    // A run is named by nobody: its blocks carry their full names ("blocks.3") beneath it.
    layers.emplace_back("", std::make_unique<ActivationCheckpoint>(std::move(run), policy.offload_to_host));
  }
  return layers;
}

}  // namespace tidal::nn
