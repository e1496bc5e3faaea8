// Where rotary_apply's pairs lie in a fused qkv, derived from its shape and the options, with the
// checks both backends make: one definition, so the CPU and GPU cannot disagree on the layout.
#pragma once

#include "core/tensor.h"
#include "ops/rotary.h"

#include <cstdint>

namespace tidal::ops {

struct RotaryLayout {
  std::int64_t rows;           // token rows (B T); row r holds position (table row) r % seq_len,
  std::int64_t seq_len;        // T, or positions[r] where the options give positions
  const std::int32_t* positions;  // [rows] or null
  std::int64_t width;          // a row's features, (n_head + 2 n_kv_head) hd
  std::int64_t half;           // hd / 2: feature i pairs with i + half
  std::int64_t rotated_heads;  // n_head + n_kv_head: the q heads, then the k heads, from a row's start
};

// qkv [..., T, (n_head + 2 n_kv_head) hd] with hd even; cos, sin fp32 [T, hd/2] ([P, hd/2] and
// positions [..., T] i32 where the options give positions).
RotaryLayout rotary_layout(const Tensor& qkv, const Tensor& cos, const Tensor& sin, const RotaryOptions& opt);

}  // namespace tidal::ops
