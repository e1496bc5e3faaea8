// The tiny GPT shape the chunk, ZeRO and stage-cost tests share: 2 heads, width 16, vocabulary
// 40, sequence 8, no dropout.
#pragma once

#include "config/config.h"

namespace tidal::testing {

inline config::ModelConfig tiny_gpt(int layers) {
  config::ModelConfig c;
  c.type = "gpt";
  c.n_layer = layers;
  c.n_head = 2;
  c.n_embd = 16;
  c.vocab_size = 40;
  c.seq_len = 8;
  c.dropout = 0.0;
  return c;
}

}  // namespace tidal::testing
