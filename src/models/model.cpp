#include "models/model.h"

#include "nn/chunked_loss.h"
#include "nn/on_host.h"
#include "nn/runner.h"

#include <algorithm>

namespace tidal::models {

Tensor Model::forward(const Tensor& x, nn::Context& ctx) {
  Tensor h = x;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    if (i + 1 == layers_.size() && whole_logits_) ctx.saved = {h};  // logits, for callers that want them
    h = ctx.forward(*layers_[i], h, i);
  }
  return h;
}

Tensor Model::backward(const Tensor& dloss, nn::Context& ctx) {
  Tensor g = dloss;
  for (std::size_t i = layers_.size(); i-- > 0;) g = ctx.backward(*layers_[i], g, i);
  ctx.saved.clear();
  return g;
}

ModelOutput Model::run_forward(nn::Context& ctx) {
  TIDAL_ASSERT(ctx.state().batch != nullptr, "run_forward without a batch");
  Tensor loss = ctx.state().runner->forward(*this, input(*ctx.state().batch), ctx);
  ModelOutput out{ctx.saved.empty() ? Tensor() : ctx.saved.at(0), loss.item()};
  ctx.saved.clear();  // backward does not read them: the logits live as long as the caller keeps them
  return out;
}

void Model::run_backward(nn::Context& ctx, float dloss) {
  ctx.state().runner->backward(*this, Tensor::full({1}, dloss), ctx);
}

void Model::materialize(std::uint64_t seed, Allocator& alloc) {
  assign_names("");
  for (nn::Parameter* p : parameters()) nn::materialize(*p, seed, alloc);
}

void Model::add_embedding_layer(std::string name, std::unique_ptr<nn::Module> m, bool on_host) {
  if (on_host) m = std::make_unique<nn::OnHost>(std::move(m));
  add_layer(std::move(name), std::move(m));
}

void Model::add_blocks(int n, const std::function<std::unique_ptr<nn::Module>()>& make_block,
                       const nn::CheckpointPolicy& policy) {
  std::vector<std::pair<std::string, std::unique_ptr<nn::Module>>> blocks;
  for (int i = 0; i < n; ++i) blocks.emplace_back("blocks." + std::to_string(i), make_block());
  TIDAL_ASSERT(blocks_in_layer_.empty(), "a model has one run of blocks");
  first_block_layer_ = int(layers_.size());
  for (auto& [name, layer] : nn::checkpointed_blocks(std::move(blocks), policy)) add_layer(name, std::move(layer));
  // checkpointed_blocks groups runs of policy.every blocks (the last may be shorter).
  const int per_layer = std::max(1, policy.every);
  for (int i = 0; i < n; i += per_layer) blocks_in_layer_.push_back(std::min(per_layer, n - i));
  TIDAL_ASSERT(end_block_layer() == int(layers_.size()), "blocks_in_layer disagrees with checkpointed_blocks");
}

void Model::add_head_and_loss(std::string head_name, std::unique_ptr<nn::Module> head, std::unique_ptr<nn::Loss> loss,
                              const nn::CheckpointPolicy& policy) {
  if (policy.loss_chunks <= 1) {
    add_layer(std::move(head_name), std::move(head));
    add_layer("loss", std::move(loss));
    return;
  }
  // Named by nobody: the head and the loss keep their names beneath it.
  add_layer("", std::make_unique<nn::ChunkedLoss>(std::move(head_name), std::move(head), std::move(loss),
                                                  policy.loss_chunks));
  whole_logits_ = false;
}

void Model::zero_grad() {
  for (nn::Parameter* p : parameters())
    if (!p->frozen) p->grad.zero_();
}

std::int64_t Model::num_parameters(bool trained_only) {
  std::int64_t n = 0;
  // An expert's parameters stand for the group's other ranks' experts too (nn/moe.h).
  for (nn::Parameter* p : parameters())
    if (!trained_only || !p->frozen)
      n += (p->full_shape.size() ? p->full_shape : p->shape).numel() * (p->expert_group ? p->expert_group->size() : 1);
  return n;
}

nn::Parameter& Model::parameter(const std::string& name) {
  for (nn::Parameter* p : parameters())
    if (p->name == name) return *p;
  throw Error(fmt::format("the model has no parameter '{}'", name));
}

}  // namespace tidal::models
