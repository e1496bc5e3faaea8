// Activation checkpointing: a wrapper that keeps only its input in forward and, in backward,
// recomputes the wrapped module's forward before running its backward (colossal-ai.txt sec. I,
// patrickstar-v2 sec. 6.1.2, optimus-2d Fig. 6). The recomputation goes through the Runner, so
// hooks (the memory manager's access / release) see it as a forward. Dropout masks are keyed by
// (seed, layer, step, sample), so the recomputed forward draws the same masks: results are
// bitwise those of the run without checkpointing.
//
// The wrapped module is a transparent child (registered under ""): parameter names do not
// change, so checkpoints load with or without checkpointing.
#pragma once

#include "nn/module.h"

#include <memory>
#include <vector>

namespace tidal::nn {

// What to checkpoint: runs of `every` consecutive blocks, each run one checkpoint (0 = none,
// 1 = every block). offload_to_host moves the kept inputs to the host tier between forward and
// backward (from the GPU; on a CPU-only machine it moves them out of the activation pool).
// selective: no whole blocks, only what is cheap to make again: each MLP's activation output
// (remade from its input: Mlp) and each attention's q, k, v (remade by the qkv projection:
// MultiHeadSelfAttention), one extra qkv projection per block and step.
// loss_chunks: the output layer and the loss run over this many blocks of positions, so the
// logits of one block exist at a time (nn/chunked_loss.h); 1 = all at once.
struct CheckpointPolicy {
  int every = 0;
  bool offload_to_host = false;
  bool selective = false;
  int loss_chunks = 1;
};

class ActivationCheckpoint final : public Module {
 public:
  ActivationCheckpoint(std::unique_ptr<Module> inner, bool offload_to_host);

  Tensor forward(const Tensor& x, Context& ctx) override;   // the inner module's output
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  Module* inner_;
  bool offload_to_host_;
};

// Modules run one after another (a run of blocks as one unit), each a transparent child under
// the name it was given.
class Sequential final : public Module {
 public:
  void add(std::string name, std::unique_ptr<Module> m);
  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  std::vector<Module*> modules_;
};

// The blocks as layers under `policy`: the blocks themselves (every = 0), or runs of `every`
// blocks each wrapped in an ActivationCheckpoint. names[i] is block i's name ("blocks.3").
std::vector<std::pair<std::string, std::unique_ptr<Module>>> checkpointed_blocks(
    std::vector<std::pair<std::string, std::unique_ptr<Module>>> blocks, const CheckpointPolicy& policy);

}  // namespace tidal::nn
