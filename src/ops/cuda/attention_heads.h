// What cuDNN's attention (ops/cuda/cudnn_attention.h) needs in layouts of its own, on the GPU:
// the query heads in grouped order and back, and the packed documents as a score bias.
//
// cuDNN pairs query head h' with key/value head h' / (H / Hkv) (groups of adjacent heads); tidal
// pairs head h with h % Hkv (ops/attention.h: kv_head_of), and its y is already in the grouped
// order (output_head(h)). So with grouped-query heads (1 < Hkv < H) cuDNN reads the queries, and
// writes their gradients and log-sum-exps, in grouped order: head h at slot output_head(h).
#pragma once

#include "core/tensor.h"

#include <cstdint>

namespace tidal::ops::cuda {

// `rows` rows of H heads of `width` elements (bf16 / fp16 / f32): between tidal's head order
// (a row pitch of `tidal_pitch` elements) and the grouped order (a pitch of `grouped_pitch`),
// head h <-> slot output_head(h, H, Hkv). to_grouped: tidal -> grouped; else back.
void copy_heads(void* grouped, std::int64_t grouped_pitch, void* tidal, std::int64_t tidal_pitch, DType dtype,
                std::int64_t rows, std::int64_t H, std::int64_t Hkv, std::int64_t width, bool to_grouped);

// bias [B, 1, T, T] in `bias`'s dtype: 0 where query i and key j are in one document (by the
// documents' positions doc_positions [B, T] i32, ops/attention.h: Documents), -inf elsewhere.
void document_bias(Tensor& bias, const Tensor& doc_positions);

}  // namespace tidal::ops::cuda
