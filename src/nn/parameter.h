// A trainable parameter: its full dotted name (which keys its initialisation, so every parallel
// layout generates the same values), its shape, how it is initialised, and its fp32 data and
// gradient. data and grad may be views into memory owned elsewhere (chunks).
#pragma once

#include "core/tensor.h"

#include <string>

namespace tidal::nn {

struct ParameterInit {
  enum class Kind { normal, zeros, ones };
  Kind kind = Kind::normal;
  float std = 0.02f;

  static ParameterInit normal(float std) { return {Kind::normal, std}; }
  static ParameterInit zeros() { return {Kind::zeros, 0.0f}; }
  static ParameterInit ones() { return {Kind::ones, 0.0f}; }
};

struct Parameter {
  std::string local_name;  // "weight"
  std::string name;        // "blocks.0.attn.qkv.weight", set when the model is built
  Shape shape;             // what this rank holds
  ParameterInit init;
  Tensor data;  // fp32
  Tensor grad;  // fp32, accumulated by backward
  // A shard of a larger parameter (tensor parallelism): the full shape and where this block
  // starts in it. Empty when the rank holds the whole parameter.
  Shape full_shape;
  Shape offset;
};

// Allocates p's data and gradient (fp32, from alloc) and initialises the data from (seed, full
// name): a shard gets exactly its block of the full parameter's values.
void materialize(Parameter& p, std::uint64_t seed, Allocator& alloc);

}  // namespace tidal::nn
