// A loss over the rows of this rank's predictions, the mean over the replica's micro-batch
// (targets equal to the ignore index excluded). forward returns the loss [1]; backward takes
// dloss [1] and returns the logits' gradient.
//
// The pieces are open to a caller that runs the output layer over blocks of rows
// (nn/chunked_loss.h): add_rows sums the rows' losses in row order, so blocks added one after
// another give the sum of one call; gradient() is that of any one block.
//
// A rank holding part of the batch (a sequence-parallel rank's positions, a 2D grid's samples)
// takes its part of the targets, and sums the loss and the target count over `batch_groups` (the
// ranks holding the other parts), so the mean is over the replica's whole micro-batch, equal on
// each of them.
#pragma once

#include "comm/communicator.h"
#include "nn/batch_slice.h"
#include "nn/module.h"

#include <vector>

namespace tidal::nn {

// Summed losses and the count of targets they cover.
struct LossSum {
  double sum = 0;
  double count = 0;
};

// The rows' losses [N] added to `total` on the host in double, in row order, and the rows whose
// target [N] is not ignored counted (copied from a GPU's memory); on meta tensors (a planned step)
// every row counts.
void add_row_losses(LossSum& total, const Tensor& losses, const Tensor& targets);

// `values` summed over each of `groups` in turn (in fp32, on the host memory beside `device`'s
// tensors); on meta memory (a planned step) the collectives are issued and `values` returned.
std::vector<double> sum_over_groups(std::vector<double> values, const std::vector<comm::Communicator*>& groups,
                                    Device device);

class Loss : public Module {
 public:
  Loss(BatchSlice part, std::vector<comm::Communicator*> batch_groups)
      : part_(part), batch_groups_(std::move(batch_groups)) {}

  Tensor forward(const Tensor& logits, Context& ctx) final;  // logits [..., classes here] -> [1]
  Tensor backward(const Tensor& dloss, Context& ctx) final;

  // This rank's targets [rows] (its part of the batch's; rows = the logits' rows).
  Tensor targets(const Batch& batch) const;
  // Adds the losses of logits [..., classes here] against targets [rows] (one per row of the
  // logits) to `total`, row by row; ctx keeps what gradient() needs.
  virtual void add_rows(LossSum& total, const Tensor& logits, const Tensor& targets, Context& ctx) = 0;
  // The gradient of scale x those rows' summed loss (the logits' shape), written over the logits
  // when ctx holds the only reference to them.
  virtual Tensor gradient(float scale, Context& ctx) = 0;
  // `mine` summed over the replica's micro-batch (every rank holding another part of it).
  LossSum over_replica(LossSum mine, Device device) const;
  // The mean loss [1] over the replica's micro-batch from this rank's sums, and the replica's
  // target count, by which backward divides dloss (gradient_scale).
  struct Mean {
    Tensor loss;
    float count;
  };
  Mean replica_mean(LossSum mine, Context& ctx) const;
  static float gradient_scale(const Tensor& dloss, float count) { return count > 0 ? dloss.item() / count : 0.0f; }

 private:
  BatchSlice part_;
  std::vector<comm::Communicator*> batch_groups_;
};

// Targets of a batch that count in the loss (not the ignore index): a micro-batch's mean loss
// weighs this much in the step's.
std::int64_t valid_targets(const Batch& batch);

}  // namespace tidal::nn
