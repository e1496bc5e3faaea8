// Deterministic parameter initialisation keyed by (seed, parameter id, element index). A shard
// is a rectangular block of the full parameter at `offset`; it computes only its own elements
// and equals the same block of the full tensor bit for bit.
#pragma once

#include "core/tensor.h"

#include <cstdint>

namespace tidal {

struct InitKey {
  std::uint64_t seed = 0;
  std::uint64_t param_id = 0;
};

// Normal(mean, std) into `out`, a block of a tensor of shape `full` starting at `offset`
// (offset has one entry per dimension; empty = the whole tensor).
void init_normal(Tensor& out, InitKey key, float mean, float std, const Shape& full, const Shape& offset = {});
// Uniform [lo, hi) likewise.
void init_uniform(Tensor& out, InitKey key, float lo, float hi, const Shape& full, const Shape& offset = {});

}  // namespace tidal
