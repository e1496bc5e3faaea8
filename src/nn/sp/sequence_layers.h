// The layers of sequence parallelism (colossal-ai.txt sec. II-B-3): rank s of the sequence ring
// holds positions [s T / N, (s + 1) T / N) of every sample of the replica's micro-batch, in both
// activation layouts (H = F = [B, T / N, C]). Embeddings, positions (global), LayerNorm, dropout
// (the single process's masks), linears, the tied head and the loss run locally on those
// positions; only attention communicates, by ring self-attention (nn/sp/ring_attention.h), and
// the loss sums its total and count over the ring.
//
// Parameters are whole on every rank: each rank's gradient is the share of its positions, and
// the trainer sums the shares over data x sequence (GroupKind::data_sequence).
#pragma once

#include "comm/communicator.h"
#include "nn/layer_factory.h"

namespace tidal::nn::sp {

// `ring` is the sequence group, ordered by position in the sequence.
std::unique_ptr<LayerFactory> layers_sequence(comm::Communicator& ring);

}  // namespace tidal::nn::sp
