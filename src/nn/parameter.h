// A parameter: its full dotted name (which keys its initialisation, so every parallel
// layout generates the same values), its shape, how it is initialised, and its fp32 data and
// gradient. data and grad may be views into memory owned elsewhere (chunks).
#pragma once

#include "core/tensor.h"
#include "ops/nf4.h"

#include <memory>

#include <string>
#include <vector>

namespace tidal::comm {
class Communicator;
}

namespace tidal::nn {

struct ParameterInit {
  enum class Kind { normal, zeros, ones, uniform };
  Kind kind = Kind::normal;
  float std = 0.02f;  // normal's standard deviation; uniform's bound b of [-b, b)

  static ParameterInit normal(float std) { return {Kind::normal, std}; }
  static ParameterInit uniform(float bound) { return {Kind::uniform, bound}; }
  static ParameterInit zeros() { return {Kind::zeros, 0.0f}; }
  static ParameterInit ones() { return {Kind::ones, 0.0f}; }
};

struct Parameter {
  std::string local_name;  // "weight"
  std::string name;        // "blocks.0.attn.qkv.weight", set when the model is built
  Shape shape;             // what this rank holds
  ParameterInit init;
  Tensor data;  // fp32
  Tensor grad;  // fp32, accumulated by backward; undefined when frozen
  // Not trained (the base under low-rank adapters, nn/lora.h): no gradient is computed or kept, no
  // optimizer state; its data is held in the compute dtype, never updated.
  bool frozen = false;
  // A frozen linear's weight held in NF4 instead (finetune.base_dtype = "nf4"; data then
  // undefined): the linears dequantize it for each product (linear_weight, nn/linear.h).
  std::shared_ptr<const ops::Nf4Weight> nf4;
  // A shard of a larger parameter (tensor parallelism): the full shape and where this block
  // starts in it. Empty when the rank holds the whole parameter. A block may run past the end of
  // dimension 0 (a vocabulary split into equal blocks that do not divide it): the rows outside
  // are padding, held as zeros and never saved (rows_inside).
  Shape full_shape;
  Shape offset;
  // Dimension 0 of the full parameter as `segments` equal parts (a fused qkv weight: q | k | v),
  // the shard holding its block of each: local rows [m s, (m+1) s) are full rows
  // [m S + offset[0], m S + offset[0] + s) for segment m (s, S = local, full rows / segments).
  int segments = 1;
  // How many ranks of the tensor group hold this same block (a replicated bias: all of them).
  // The gradient norm counts a block once; gather_parameter averages the copies.
  int copies = 1;
  // Groups of ranks that hold this same block but see different samples (2D grid rows, 2.5D
  // depth): its gradient is the sum over each of these groups, taken once per step
  // (reduce_replicated_gradients, nn/tp/shard.h).
  std::vector<comm::Communicator*> replicas;
  // A mixture's expert under expert parallelism (nn/moe.h): the other ranks of this group hold the
  // mixture's other experts. The gradient norm sums it over the group, and data parallelism sums
  // its gradient over the data ranks holding the same experts (parallel::GroupKind::expert_data)
  // rather than all of them. Null: every data rank holds it.
  comm::Communicator* expert_group = nullptr;
};

// The rows of p's block that lie inside the full parameter: shape[0], fewer in the last block of a
// padded split, 0 for a block wholly in the padding.
std::int64_t rows_inside(const Parameter& p);

// Allocates p's data and gradient (fp32, from alloc) and initialises the data from (seed, full
// name): a shard gets exactly its block of the full parameter's values. A frozen p gets no
// gradient and its data in `frozen_dtype` (the fp32 values rounded once).
void materialize(Parameter& p, std::uint64_t seed, Allocator& alloc, DType frozen_dtype = DType::f32);

}  // namespace tidal::nn
