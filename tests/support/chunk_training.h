// The training loop of the single-process chunk tests (offload, disk tier): a model whose
// parameters a ChunkManager holds, trained with AdamW on fixed random batches.
#pragma once

#include "config/config.h"
#include "memory/chunk_manager.h"
#include "models/model.h"
#include "nn/runner.h"
#include "ops/optimizer_step.h"
#include "support/models.h"
#include "support/random.h"

#include <span>
#include <utility>

namespace tidal::testing {

// A GPT whose parameters and optimizer states are large beside its activations (4 layers of
// width 64; batches of two sequences of 16 tokens).
inline config::ModelConfig chunk_test_gpt() {
  config::ModelConfig c = tiny_gpt(4);
  c.n_head = 4;
  c.n_embd = 64;
  c.vocab_size = 128;
  c.seq_len = 16;
  return c;
}

// `steps` AdamW steps on batches of 2 x 16 tokens of a 128-token vocabulary (the same batches on
// every call), the parameters in the chunks of `keepers` (one manager, or several that split
// them); after each, after_step(loss).
template <class AfterStep>
void train_on_chunks(models::Model& model, std::span<memory::ChunkManager* const> keepers, int steps,
                     Allocator& activations, AfterStep&& after_step) {
  nn::Runner runner;
  for (memory::ChunkManager* c : keepers) runner.add_hooks(c);
  const ops::AdamWOptions opt{.lr = 1e-2f, .weight_decay = 0.01f};
  for (int step = 1; step <= steps; ++step) {
    nn::Batch batch;
    batch.tokens = randint({2, 16}, 300 + std::uint64_t(step), 0, 128);
    batch.targets = randint({2, 16}, 400 + std::uint64_t(step), 0, 128);
    nn::StepState state{
        .runner = &runner, .seed = 11, .step = std::uint32_t(step), .batch = &batch, .activations = &activations};
    nn::Context ctx(state);
    for (memory::ChunkManager* c : keepers) c->zero_grad();
    const float loss = model.run_forward(ctx).loss;
    for (memory::ChunkManager* c : keepers) c->end_forward();
    model.run_backward(ctx);
    for (memory::ChunkManager* c : keepers) c->end_backward();
    for (memory::ChunkManager* c : keepers) c->adamw_step(opt, step);
    after_step(loss);
  }
}

template <class AfterStep>
void train_on_chunks(models::Model& model, memory::ChunkManager& chunks, int steps, Allocator& activations,
                     AfterStep&& after_step) {
  memory::ChunkManager* keepers[] = {&chunks};
  train_on_chunks(model, std::span<memory::ChunkManager* const>(keepers), steps, activations,
                  std::forward<AfterStep>(after_step));
}

}  // namespace tidal::testing
