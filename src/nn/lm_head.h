// Output layer tied to an embedding table: logits = x E^T (+ bias). The table is borrowed from
// the embedding that owns it; its gradient gets both contributions (lookup and head).
#pragma once

#include "nn/module.h"

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

}  // namespace tidal::nn
