// PatrickStar's chunk-based memory manager (patrickstar-v2 sec. 6.1): a model's parameters live
// in chunk lists instead of tensors of their own, and the module hooks move each parameter's
// tensor between the states of tensor_state.h as modules run.
//
// Lists (chunk_layout.h gives the shared layout): `param` in the compute precision, and the
// optimizer's fp32 `master` copy, `momentum` and `variance`. Gradients reuse the param list
// (Fig. 5): during backward a parameter's gradient grows in a temporary buffer, and when its
// last user's backward is done (a reference count: a tied embedding has two users) it is copied
// over the parameter's own slot, which the step does not need until the optimizer rewrites it
// from the master copy. Gradient accumulation over micro-batches (which PatrickStar lacked)
// cannot reuse the slot - the next micro-batch needs the parameters - so with
// ChunkOptions::accumulate the gradients are summed into a fp32 `grad` list of the same layout.
//
// Protocol, per micro-batch: the hooks run forward (access -> COMPUTE, release ->
// HOLD_AFTER_FWD); end_forward() resets HOLD_AFTER_FWD to HOLD and arms the backward counts;
// the hooks run backward (a recomputed forward inside it releases to HOLD_AFTER_FWD as in the
// forward pass); end_backward() completes the gradients of parameters this pass did not use.
// Between access and release a parameter's `data` (and in backward its `grad`) is a tensor of
// its own shape; outside, both are undefined (Alg. 2 line 38), so a use without access fails
// loudly instead of reading a stale place.
#pragma once

#include "core/allocator.h"
#include "memory/chunk_layout.h"
#include "memory/tensor_state.h"
#include "nn/module.h"
#include "nn/runner.h"
#include "ops/optimizer_step.h"

#include <map>
#include <vector>

namespace tidal::memory {

struct ChunkOptions {
  std::int64_t chunk_elements = 0;   // 0 = search_chunk_size
  DType compute_dtype = DType::f32;  // the param list (bf16 / fp16 under mixed precision)
  bool accumulate = false;           // gradients of several micro-batches: a fp32 grad list
};

enum class ChunkKind { param, master, momentum, variance, grad };
const char* chunk_kind_name(ChunkKind k);

class ChunkManager final : public nn::ModuleHooks {
 public:
  // Takes over `params` (materialized fp32, in initialisation order), counting their users among
  // the modules under `model`. Their values move into the lists: `param` chunks come from
  // `device`, the optimizer's lists from `host`.
  ChunkManager(nn::Module& model, std::vector<nn::Parameter*> params, const ChunkOptions& options,
               Allocator& device = host_allocator(), Allocator& host = host_allocator());
  ~ChunkManager() override;
  ChunkManager(const ChunkManager&) = delete;
  ChunkManager& operator=(const ChunkManager&) = delete;

  void before_forward(nn::Module& m) override;
  void after_forward(nn::Module& m) override;
  void before_backward(nn::Module& m) override;
  void after_backward(nn::Module& m) override;
  void end_forward();
  void end_backward();
  // Zeroes the accumulated gradients (ChunkOptions::accumulate) before a step's micro-batches.
  void zero_grad();

  // Alg. 1 and 2 for one parameter. `backward`: a gradient buffer is attached on access.
  void access(nn::Parameter& p, bool backward);
  void release(nn::Parameter& p, TensorState target);

  // AdamW on every parameter from its complete gradient, then the param list is rewritten from
  // the updated master copy (HOLD_AFTER_BWD -> COMPUTE -> HOLD). `step` counts from 1.
  void adamw_step(const ops::AdamWOptions& options, std::int64_t step);

  TensorState state(const nn::Parameter& p) const;
  Placement placement(int chunk) const;  // of param chunk `chunk`
  const ChunkLayout& layout() const { return layout_; }
  const std::vector<nn::Parameter*>& parameters() const { return params_; }
  // p's slot in a list (a view of its shape). After end_backward, gradient() is the step's
  // gradient: the param slot, or the grad list's with accumulation.
  Tensor slot(ChunkKind kind, const nn::Parameter& p) const;
  Tensor gradient(const nn::Parameter& p) const;
  // Bytes held by every chunk of every list (the model data).
  std::int64_t model_data_bytes() const;

 private:
  struct Tracked {
    nn::Parameter* param;
    TensorState state = TensorState::hold;
    int users = 0;          // modules that use it (a forward or backward each)
    int backward_left = 0;  // users whose backward is still to come in this pass
  };
  Tracked& tracked(const nn::Parameter& p);
  const Tracked& tracked(const nn::Parameter& p) const;
  void set_state(Tracked& t, TensorState to);
  // The gradient buffer of p is complete: into its slot (or summed into the grad list).
  void store_gradient(Tracked& t);
  std::vector<Tensor>& list(ChunkKind kind) { return lists_.at(kind); }

  std::vector<nn::Parameter*> params_;
  ChunkOptions options_;
  ChunkLayout layout_;
  std::map<ChunkKind, std::vector<Tensor>> lists_;  // kind -> chunk payloads
  std::map<const nn::Parameter*, std::size_t> index_;
  std::vector<Tracked> tracked_;
};

}  // namespace tidal::memory
