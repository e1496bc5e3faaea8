// LoRA (Hu et al. 2021): a frozen linear y = x W^T gains a trainable low-rank term,
// y += (alpha / r) dropout(x) A^T B^T, A [r, in], B [out, r], as Hugging Face PEFT's LoraLayer
// computes it. A fused linear of tidal's (qkv: q | k | v; SwiGLU's gate | up) stands for several of
// Hugging Face's, each a block of its output rows: an adapter holds one (A, B) per block it targets
// (PEFT's q_proj and v_proj on one qkv), B covering that block's rows only.
//
// The adapter is attached to its linear (Module::attach_adapter): the Runner adds its output to the
// linear's, so no linear knows about it, and the memory manager sees A and B as the parameters of
// a module of their own.
//
// Under 1D tensor parallelism (nn/tp/linear_1d.h) the adapter splits as its weight does: beside a
// column-parallel weight (rows split) A is whole on every rank and B's rows split as the weight's,
// the rank's term its block of rows, and dh = dy B summed over the group in backward (copy_to_group
// on h); beside a row-parallel weight (columns split) A's columns split as the weight's and B is
// whole, h = x A^T summed over the group in forward (reduce_from_group). Either way two collectives
// of [tokens, r] beside the linear's own.
#pragma once

#include "comm/communicator.h"
#include "nn/module.h"

#include <string>
#include <vector>

namespace tidal::nn {

struct LoraOptions {
  int rank = 8;
  float alpha = 16.0f;  // the term's scale is alpha / rank
  float dropout = 0.0f;
};

// A block of the linear's output rows that one (A, B) adapts: Hugging Face's module name ("q_proj")
// and its rows [first_row, first_row + rows).
struct LoraTarget {
  std::string name;
  std::int64_t first_row = 0, rows = 0;
};

class LowRankAdapter final : public Module {
 public:
  // The adapter of `weight` [out, in] (this rank's block of it: its full_shape, offset and segments
  // say how it is split over `group`, the tensor group; null when whole) on `targets`, blocks of
  // the full weight's rows, in order, not overlapping; a split weight's targets are whole segments
  // of it. A is initialised as PEFT does (Kaiming-uniform: U(-1/sqrt(in), 1/sqrt(in))), B as zeros,
  // so the adapted model starts as the base. Parameters: "<name>.A" [r, in] and "<name>.B" [rows, r].
  LowRankAdapter(const Parameter& weight, std::vector<LoraTarget> targets, const LoraOptions& options,
                 comm::Communicator* group = nullptr);

  // x [..., in] -> the term [..., out] (zero outside the targets' rows).
  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

  // The targets in this rank's rows of the weight (all of them when it is whole).
  const std::vector<LoraTarget>& targets() const { return targets_; }
  float scale() const { return scale_; }
  Parameter& a(std::size_t i) { return *a_[i]; }
  Parameter& b(std::size_t i) { return *b_[i]; }

 private:
  // Whether target i's rows are all of the output (its term written in place, not into a block).
  bool whole(std::size_t i) const { return targets_[i].rows == out_; }

  enum class Split { none, rows, columns };
  Split split_ = Split::none;
  comm::Communicator* group_ = nullptr;
  std::int64_t in_, out_;  // this rank's block of the weight
  int rank_;
  float scale_;
  std::vector<LoraTarget> targets_;
  std::vector<Parameter*> a_, b_;
  Module* dropout_ = nullptr;  // null: no dropout
};

}  // namespace tidal::nn
