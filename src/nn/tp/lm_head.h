// The output layer tied to a vocab-parallel embedding (1D; Megatron-LM): rank r's logits are its
// classes, x E_r^T (+ b_r), with E_r its rows of the table - the plain TiedLmHead on the block -
// entered through copy_to_group, so dx is summed over the group in backward. The logits stay
// split for VocabParallelCrossEntropy.
#pragma once

#include "comm/communicator.h"
#include "nn/lm_head.h"

namespace tidal::nn::tp {

class VocabParallelLmHead final : public Module {
 public:
  // `table` is this rank's [V/p, C] block of the embedding (borrowed); with `bias`, the head owns
  // its [V/p] block of a bias [V] named "bias".
  VocabParallelLmHead(Parameter& table, bool bias, comm::Communicator& group);

  Tensor forward(const Tensor& x, Context& ctx) override;  // [..., C] -> [..., V/p]
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  comm::Communicator& group_;
  TiedLmHead* head_;  // on this rank's rows; a transparent child (its bias is our "bias")
};

}  // namespace tidal::nn::tp
