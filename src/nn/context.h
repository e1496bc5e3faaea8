// Per-call state of a forward/backward pass. A StepState is shared by the whole pass (the
// runner, training flag, dropout keys, the batch); a Context belongs to one module call and
// holds what that call's backward needs plus the contexts of its children.
#pragma once

#include "core/allocator.h"
#include "core/tensor.h"
#include "ops/attention_kernels.h"

#include <any>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

namespace tidal::nn {

class Module;
class Runner;
struct ExpertRecord;
struct Parameter;

// A zero-bubble schedule's B pass (pipeline/schedule.h) leaves the products of weight gradients
// here for the micro-batch's W pass.
struct WeightGradients {
  // What the module now in backward left: each product completes `param`'s gradient
  // (nn/linear.cpp). The runner takes them when the module's backward returns.
  struct Product {
    Parameter* param;
    std::function<void()> run;
  };
  std::vector<Product> products;
  // The W pass: one per module that left products, in the order of their backwards, each run
  // inside that module's weight-gradient hooks (nn/runner.h).
  std::vector<std::function<void()>> passes;
};

// Model inputs; the fields a model does not use stay undefined.
struct Batch {
  Tensor tokens{};     // [B, T] i32 (GPT, BERT)
  Tensor token_types{};  // [B, T] i32 (BERT)
  Tensor attn_mask{};  // [B, T] i32, 1 = real token, 0 = padding (BERT)
  Tensor images{};     // [B, channels, H, W] f32 (ViT)
  Tensor targets{};    // [B, T] or [B] i32; -100 = ignore
  // [B, T] i32: each token's position in its document where sequences pack several and attend
  // only inside them (data.cross_document_attention = false; ops/attention.h). Undefined: each
  // sequence is one document, token t at position t.
  Tensor positions{};
};

struct StepState {
  Runner* runner = nullptr;
  bool training = true;
  std::uint64_t seed = 0;  // dropout seed
  std::uint32_t step = 0;
  // Index of this micro-batch's first sample within the step's global batch. Dropout keys on it
  // (not on the micro-batch number), so masks are the same under any split of the batch into
  // micro-batches and data-parallel replicas.
  std::int64_t first_sample = 0;
  const Batch* batch = nullptr;
  Allocator* activations = &host_allocator();  // where activations and their gradients live
  // A module runs over one block of its rows, and more of them follow in this backward
  // (nn/chunked_loss.h): its backward is not yet complete, so the hooks hear after_backward_part,
  // and after_backward with the last block (the memory manager stores, and data parallelism
  // reduces, a gradient once).
  bool more_parts = false;
  // This micro-batch's weight in the step's loss, and a further factor on its gradient (fp16's
  // loss scale; pipeline::MicroBatch's loss_scale and gradient_scale): a loss the model adds
  // inside its layers (a router's auxiliary losses, nn/moe.h) counts with the weight and takes
  // their product as its gradient, as the loss at the top does.
  float loss_weight = 1.0f;
  float gradient_scale = 1.0f;
  // Where the mixtures of experts tell what they routed this step (nn/moe.h); null: nowhere.
  ExpertRecord* experts = nullptr;
  // A zero-bubble schedule's input-gradient pass (pipeline/schedule.h's B): the linears leave
  // their weight gradients' products here for the micro-batch's W pass; null: computed in the
  // backward (and always in one over blocks of rows: more_parts, or for a head whose output
  // gradient is many times its input: nn/linear.cpp).
  WeightGradients* weight_gradients = nullptr;
  // Which kernels compute attention on a GPU (train.attention; ops/attention_kernels.h).
  ops::AttentionKernels attention = ops::AttentionKernels::automatic;
  // The linear layers' products in fp8 where they can (train.precision = "fp8"; nn/fp8_linear.h).
  bool fp8_linears = false;
};

// The batch's tensors copied into `memory` (the undefined ones stay undefined).
Batch copy_batch(const Batch& batch, Allocator& memory);

class Context {
 public:
  explicit Context(const StepState& state) : state_(&state) {}

  const StepState& state() const { return *state_; }
  // Context of the child call in `slot` (made on first use).
  Context& child(std::size_t slot);
  // A new context in `slot` for a child that runs elsewhere (nn/on_host.h): its pass keeps its
  // activations in `activations` and reads `batch` (a copy there). backward finds it as child(slot).
  Context& placed_child(std::size_t slot, Allocator& activations, Batch batch);
  // A new context in `slot` for a child run over one block of rows (StepState::more_parts).
  Context& part_child(std::size_t slot, bool more_parts);

  // The context of this call's module's adapter (Module::adapter; made on first use).
  Context& adapter_child();

  // Run a child module through the runner, in this call's child context `slot`. Outside training
  // (evaluation, sampling) the child keeps nothing once its forward returns.
  Tensor forward(Module& m, const Tensor& x, std::size_t slot);
  Tensor backward(Module& m, const Tensor& dy, std::size_t slot);
  // Children that share nothing run at once on the host's threads (Runner::forward_concurrently):
  // ms[i] on xs[i] (dys[i]) in child context slots[i], its output handed to done(i, y) on the
  // thread that ran it.
  using Done = std::function<void(std::size_t i, const Tensor& y)>;
  void forward_concurrently(std::span<Module* const> ms, std::span<const Tensor> xs, std::span<const std::size_t> slots,
                            const Done& done);
  void backward_concurrently(std::span<Module* const> ms, std::span<const Tensor> dys,
                             std::span<const std::size_t> slots, const Done& done);

  // A new activation tensor from the step's activation allocator.
  Tensor empty(const Shape& shape, DType dtype = DType::f32) const {
    return Tensor::empty(shape, dtype, *state_->activations);
  }

  // t in `dtype`: itself when it already is, else a converted copy among the activations (a
  // layer with fp32 kernels widens bf16 / fp16 activations on the way in and rounds on the way out).
  Tensor as(const Tensor& t, DType dtype) const;

  std::vector<Tensor> saved;  // what this call's backward needs
  std::any kept;              // and what it needs that is no tensor (a router's decisions, nn/moe.h)

  // Drops everything saved here and below (activation checkpointing keeps only the input).
  void clear();

  // Selective recomputation: a parent lets go of a tensor its children saved but that it can
  // make again cheaply. forget(t) empties every entry saved below this context that is `t`
  // itself (the same memory, shape, strides and dtype) and returns how many; remember(t') puts
  // the remade t' in those places, before the children's backward reads them.
  std::size_t forget(const Tensor& t);
  void remember(const Tensor& t);

 private:
  struct Placement {  // a placed child's own state and batch
    StepState state;
    Batch batch;
  };
  const StepState* state_;
  std::unique_ptr<Placement> placement_;
  std::vector<std::unique_ptr<Context>> children_;
  std::unique_ptr<Context> adapter_;
  std::vector<Tensor*> forgotten_;  // the saved entries forget() emptied
};

}  // namespace tidal::nn
