// The 1D (Megatron-LM) layer factory: colossal-ai.txt sec. III-A "1D". Hidden states H are
// replicated over the tensor group; input_linear is column-parallel (F = features split),
// output_linear row-parallel; the token table is split by vocabulary and the tied head's logits
// stay split for the vocab-parallel cross-entropy. Replicated parameters (LayerNorm, positions,
// row-parallel biases) get identical gradients on every rank, so they need no reduction.
#pragma once

#include "comm/communicator.h"
#include "nn/layer_factory.h"

namespace tidal::nn::tp {

std::unique_ptr<LayerFactory> layers_1d(comm::Communicator& tensor_group);

}  // namespace tidal::nn::tp
