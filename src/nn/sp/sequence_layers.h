// The layers of sequence parallelism (colossal-ai.txt sec. II-B-3): rank s of the sequence ring
// holds T / N positions of every sample of the replica's micro-batch, [s T / N, (s + 1) T / N)
// or, zig-zag, the chunks s and 2N - 1 - s of 2N (nn/batch_slice.h), in both activation layouts
// (H = F = [B, T / N, C]). Embeddings, positions (global), LayerNorm, dropout
// (the single process's masks), linears, the tied head and the loss run locally on those
// positions; only attention communicates, by ring self-attention (nn/sp/ring_attention.h) or
// Ulysses (nn/sp/ulysses_attention.h), and
// the loss sums its total and count over the ring.
//
// Parameters are whole on every rank: each rank's gradient is the share of its positions, and
// the trainer sums the shares over data x sequence (GroupKind::data_sequence).
#pragma once

#include "comm/communicator.h"
#include "nn/layer_factory.h"
#include "parallel/sequence_mode.h"

namespace tidal::nn::sp {

// `ring` is the sequence group, ordered by place in the ring; zigzag: place r holds chunks r and
// 2N - 1 - r of 2N (nn/batch_slice.h), else chunk r of N; attention by ring self-attention or
// Ulysses' all-to-all of heads (nn/sp/ulysses_attention.h).
std::unique_ptr<LayerFactory> layers_sequence(comm::Communicator& ring, bool zigzag, parallel::SequenceMode mode);

}  // namespace tidal::nn::sp
