// Output layer tied to an embedding table: logits = x E^T (+ bias). The table is borrowed from
// the embedding that owns it; its gradient gets both contributions (lookup and head).
#pragma once

#include "nn/embedding.h"

#include <functional>

namespace tidal::nn {

class TiedLmHead final : public Module {
 public:
  // With `bias`, the head owns a bias [V] named "bias" (BERT's decoder bias). When the table is a
  // block of rows (a vocab-parallel embedding), the bias is the same rows' block of the whole bias.
  TiedLmHead(Parameter& table, bool bias);

  Tensor forward(const Tensor& x, Context& ctx) override;  // [..., C] -> [..., V]
  Tensor backward(const Tensor& dy, Context& ctx) override;
  std::vector<Parameter*> used_parameters() override;

 private:
  Parameter& table_;  // [V, C], borrowed
  Parameter* bias_;   // [V] or null
};

// An output layer with a table of its own (model.tie_embeddings = false): logits = x W^T (+ bias)
// with W [V, C] made by the layout's vocab_embedding, so that it is split over ranks exactly as a
// tied table would be, and read by the layout's tied head. Both are transparent children: the
// parameters are named "weight" (and "bias") under this module's path.
class UntiedLmHead final : public Module {
 public:
  using HeadOn = std::function<std::unique_ptr<Module>(TableLookup& table)>;
  UntiedLmHead(std::unique_ptr<TableLookup> table, const HeadOn& head_on);

  Tensor forward(const Tensor& x, Context& ctx) override { return ctx.forward(*head_, x, 0); }
  Tensor backward(const Tensor& dy, Context& ctx) override { return ctx.backward(*head_, dy, 0); }

 private:
  Module* head_;
};

}  // namespace tidal::nn
