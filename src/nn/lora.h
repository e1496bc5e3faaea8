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
// Under tensor parallelism the adapter splits as its linear does (nn/adapter_split.h): A's columns
// as the linear's input features, B's rows as its output features, h = x A^T made whole by a
// collective of [tokens, r] in forward and dh by one in backward where the features are split.
#pragma once

#include "nn/adapter_split.h"
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
  // The adapter of `weight` [out, in] (full_shape and segments: the whole weight's) on `targets`,
  // blocks of the full weight's rows, in order, not overlapping, split as `split` says (its
  // linear's Module::adapter_split); under a split of the output features a target is whole
  // segments of the weight. A is initialised as PEFT does (Kaiming-uniform: U(-1/sqrt(in),
  // 1/sqrt(in))), B as zeros, so the adapted model starts as the base. Parameters: "<name>.A"
  // [r, in] and "<name>.B" [rows, r] (this rank's blocks of them).
  LowRankAdapter(const Parameter& weight, std::vector<LoraTarget> targets, const LoraOptions& options,
                 const AdapterSplit& split = {});

  // x [..., in] -> the term [..., out] (zero outside the targets' rows).
  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

  // The targets in this rank's output features (all of the weight's rows when they are whole).
  const std::vector<LoraTarget>& targets() const { return targets_; }
  float scale() const { return scale_; }
  Parameter& a(std::size_t i) { return *a_[i]; }
  Parameter& b(std::size_t i) { return *b_[i]; }

 private:
  // Whether target i's rows are all of the output (its term written in place, not into a block).
  bool whole(std::size_t i) const { return targets_[i].rows == out_; }

  // h [N, r], this rank's part of x A^T, -> whole for the output's samples; dh back to the input's.
  Tensor to_output(Tensor h) const;
  Tensor to_input(Tensor dh) const;

  AdapterSplit split_;
  std::int64_t in_, out_;  // this rank's input and output features
  int rank_;
  float scale_;
  std::vector<LoraTarget> targets_;
  std::vector<Parameter*> a_, b_;
  Module* dropout_ = nullptr;  // null: no dropout
};

}  // namespace tidal::nn
