// The output layer and its loss over blocks of rows (train.loss_chunks): forward runs the head
// and the loss one block of the input's rows (positions) at a time and keeps only the input and
// the targets, so the logits of one block exist at a time instead of all [rows, classes] of them;
// backward makes each block's logits again (one more head forward, as activation checkpointing
// remakes a block: nn/activation_checkpoint.h), takes the loss's gradient over them in place and
// runs the head's backward, block by block. Liger-Kernel's fused linear cross-entropy and
// torchtune's chunked output keep the same single block of logits.
//
// The loss is the mean over the replica's micro-batch as one call's would be: the blocks' sums
// add in row order (nn/loss.h). The head's backward over all but the last block runs with
// StepState::more_parts, so the hooks see one backward of the head (a gradient is stored and
// reduced once). The head and the loss are transparent children under their usual names, so
// parameter names and checkpoints do not change. Every rank of a tensor group holds the same
// rows, so the blocks (and the head's and loss's collectives in them) match across the group.
#pragma once

#include "nn/loss.h"

#include <memory>
#include <string>

namespace tidal::nn {

class ChunkedLoss final : public Module {
 public:
  ChunkedLoss(std::string head_name, std::unique_ptr<Module> head, std::unique_ptr<Loss> loss, int blocks);

  Tensor forward(const Tensor& x, Context& ctx) override;  // [..., C] -> the loss [1]
  Tensor backward(const Tensor& dloss, Context& ctx) override;

 private:
  Module* head_;
  Loss* loss_;
  int blocks_;
};

}  // namespace tidal::nn
