// 1D tensor parallelism's linear layers (Megatron-LM; colossal-ai.txt sec. III-A "1D"): the
// weight W [out, in] of a Linear is split over the p ranks of a tensor group.
//
// ColumnParallelLinear: rank r holds rows [r out/p, (r+1) out/p) of W (and of the bias). The
//   replicated input enters through copy_to_group (identity; all-reduce of dx in backward); the
//   output is this rank's slice of the features, or, with gather_output, the whole output.
// RowParallelLinear: rank r holds columns [r in/p, (r+1) in/p) of W. The input is this rank's
//   slice of the features (a column-parallel layer's output) or, with split_input, is split
//   here; partial products are summed by reduce_from_group; the bias (whole, replicated) is
//   added after the sum.
//
// Parameters keep their single-device names and record full shape and offset, so each shard
// is initialised to exactly its block of the single-device weights (core/init.h).
#pragma once

#include "comm/communicator.h"
#include "nn/module.h"

namespace tidal::nn::tp {

class ColumnParallelLinear final : public Module {
 public:
  // With `segments` > 1 the output is that many equal parts (a fused q | k | v) and rank r holds
  // its slice of each, so its outputs are whole heads of q, k and v.
  ColumnParallelLinear(std::int64_t in, std::int64_t out, bool bias, ParameterInit init, comm::Communicator& group,
                       bool gather_output = false, int segments = 1);

  Tensor forward(const Tensor& x, Context& ctx) override;  // x [..., in] -> [..., out/p] (or [..., out])
  Tensor backward(const Tensor& dy, Context& ctx) override;
  AdapterSplit adapter_split() const override;  // B's rows as the weight's (A whole)

 private:
  comm::Communicator& group_;
  std::int64_t in_, out_local_;
  bool gather_output_;
  Parameter* weight_;  // [out/p, in], rows r*out/p.. of [out, in]
  Parameter* bias_;    // [out/p] or null
};

class RowParallelLinear final : public Module {
 public:
  RowParallelLinear(std::int64_t in, std::int64_t out, bool bias, ParameterInit init, comm::Communicator& group,
                    bool split_input = false);

  Tensor forward(const Tensor& x, Context& ctx) override;  // x [..., in/p] (or [..., in]) -> [..., out]
  Tensor backward(const Tensor& dy, Context& ctx) override;
  AdapterSplit adapter_split() const override;  // A's columns as the weight's (B whole)

 private:
  comm::Communicator& group_;
  std::int64_t in_local_, out_;
  bool split_input_;
  Parameter* weight_;  // [out, in/p], columns r*in/p.. of [out, in]
  Parameter* bias_;    // [out] (replicated) or null
};

}  // namespace tidal::nn::tp
