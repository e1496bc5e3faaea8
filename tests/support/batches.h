// Batch helpers shared by the multi-rank model tests.
#pragma once

#include "nn/context.h"

namespace tidal::testing {

// Samples [first, first + n) of every tensor of a batch (a data replica's or micro-batch's
// share), contiguous.
inline nn::Batch batch_rows(const nn::Batch& b, std::int64_t first, std::int64_t n) {
  auto rows = [&](const Tensor& t) { return t.defined() ? t.slice(0, first, first + n).clone() : Tensor{}; };
  return {.tokens = rows(b.tokens), .token_types = rows(b.token_types), .attn_mask = rows(b.attn_mask),
          .images = rows(b.images), .targets = rows(b.targets)};
}

}  // namespace tidal::testing
