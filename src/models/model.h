// Model: a transformer as a sequence of layers ending in its loss (embedding, blocks, head,
// loss). forward runs the layers through the Runner; the sequence is what pipeline stages will
// slice. The model's parameters are allocated and initialised by materialize(), keyed by name.
#pragma once

#include "nn/activation_checkpoint.h"
#include "nn/loss.h"
#include "nn/module.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tidal::models {

struct ModelOutput {
  Tensor logits;  // the input of the loss layer (undefined when the loss takes blocks of them: loss_chunks)
  float loss = 0.0f;
};

class Model : public nn::Module {
 public:
  // The first layer's input in a batch (tokens, or images).
  virtual const Tensor& input(const nn::Batch& batch) const = 0;

  // Runs all layers; `ctx` keeps what backward needs. Returns the loss [1].
  Tensor forward(const Tensor& x, nn::Context& ctx) override;
  // dloss [1] -> gradient of the input (undefined for token inputs).
  Tensor backward(const Tensor& dloss, nn::Context& ctx) override;

  // Forward with the batch of ctx.state(), returning the logits and the loss.
  ModelOutput run_forward(nn::Context& ctx);
  // Backward of the loss from run_forward; dloss scales it (1 / micro-batches when accumulating).
  void run_backward(nn::Context& ctx, float dloss = 1.0f);

  // Allocates every parameter (fp32) and its gradient, and initialises it from
  // (seed, parameter name). Call once, after construction.
  void materialize(std::uint64_t seed, Allocator& alloc = host_allocator());
  void zero_grad();
  // Elements of the whole model (a shard counts as its full parameter); of its trained parameters
  // alone (not nn::Parameter::frozen) when `trained_only`.
  std::int64_t num_parameters(bool trained_only = false);
  nn::Parameter& parameter(const std::string& name);
  const std::vector<nn::Module*>& layers() const { return layers_; }
  // The layers holding the transformer blocks, [begin, end) of layers(): one block each, or a
  // checkpointed run of several (train.activation_checkpointing_k).
  int first_block_layer() const { return first_block_layer_; }
  int end_block_layer() const { return first_block_layer_ + int(blocks_in_layer_.size()); }
  // Transformer blocks in layers()[first_block_layer() + i].
  const std::vector<int>& blocks_in_layer() const { return blocks_in_layer_; }

 protected:
  template <class M>
  M& add_layer(std::string name, std::unique_ptr<M> m) {
    M& ref = add_module(std::move(name), std::move(m));
    layers_.push_back(&ref);
    return ref;
  }
  // The layer of token embeddings; `on_host` runs it on the host CPU (memory.embedding_on_host,
  // nn/on_host.h).
  void add_embedding_layer(std::string name, std::unique_ptr<nn::Module> m, bool on_host);
  // n transformer blocks named blocks.{i}, as layers under the checkpointing policy.
  void add_blocks(int n, const std::function<std::unique_ptr<nn::Module>()>& make_block,
                  const nn::CheckpointPolicy& policy);
  // The output layer `head` (named head_name) and the loss ("loss") as the last layers: two, or
  // one over policy.loss_chunks blocks of positions (nn/chunked_loss.h).
  void add_head_and_loss(std::string head_name, std::unique_ptr<nn::Module> head, std::unique_ptr<nn::Loss> loss,
                         const nn::CheckpointPolicy& policy);

 private:
  std::vector<nn::Module*> layers_;
  int first_block_layer_ = 0;
  std::vector<int> blocks_in_layer_;
  bool whole_logits_ = true;  // the loss layer's input is the logits (not blocks of them)
};

}  // namespace tidal::models
