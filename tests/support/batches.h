// Batch helpers shared by the multi-rank model tests and the model oracles.
#pragma once

#include "nn/context.h"
#include "ops/cross_entropy.h"

namespace tidal::testing {

// Samples [first, first + n) of every tensor of a batch (a data replica's or micro-batch's
// share), contiguous.
inline nn::Batch batch_rows(const nn::Batch& b, std::int64_t first, std::int64_t n) {
  auto rows = [&](const Tensor& t) { return t.defined() ? t.slice(0, first, first + n).clone() : Tensor{}; };
  return {.tokens = rows(b.tokens), .token_types = rows(b.token_types), .attn_mask = rows(b.attn_mask),
          .images = rows(b.images), .targets = rows(b.targets), .positions = rows(b.positions)};
}

// Packs documents into a [B, T] batch as data.cross_document_attention = false does
// (data/token_dataset.h): positions in documents of 1 to `longest` tokens (sample b's lengths
// cycle from b, so documents end anywhere, across any split of the positions; sample 0's first
// one continues a cut document), and with `causal` targets, no target at a document's last token.
inline void pack_documents(nn::Batch& b, std::int64_t longest, bool causal) {
  const std::int64_t B = b.tokens.dim(0), T = b.tokens.dim(1);
  b.positions = Tensor::empty({B, T}, DType::i32);
  std::int32_t* pos = b.positions.data<std::int32_t>();
  for (std::int64_t s = 0; s < B; ++s) {
    std::int64_t length = 1 + (s * 3 + 2) % longest, at = 0;
    if (s == 0) {  // the window starts at position 2 of a document
      at = 2;
      length += 2;
    }
    for (std::int64_t t = 0; t < T; ++t) {
      if (at == length) {
        at = 0;
        length = 1 + (length * 5 + s + t) % longest;
      }
      pos[s * T + t] = std::int32_t(at++);
      const bool ends = at == length;
      if (causal && ends && t + 1 < T) b.targets.data<std::int32_t>()[s * T + t] = ops::kIgnoreIndex;
    }
  }
}

}  // namespace tidal::testing
