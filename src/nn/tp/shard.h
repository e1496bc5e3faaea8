// What the rest of the engine needs to know about sharded and replicated parameters (see the
// shard fields of nn::Parameter): the full tensor gathered from the tensor group, the gradient
// sums over replicas that saw different samples, and the gradient norm counting each block once.
#pragma once

#include "comm/communicator.h"
#include "core/tensor_slices.h"
#include "io/save_plan.h"
#include "nn/parameter.h"

#include <span>

namespace tidal::nn::tp {

// The full parameter assembled from every rank's `local` (p.data, p.grad, or an optimizer state
// of p's shape) over `tensor_group`; copies of a block must be equal (one of them is taken).
// Collective over the group.
Tensor gather_parameter(const Parameter& p, const Tensor& local, comm::Communicator& tensor_group);
// This rank's block of a full tensor `full` (p.full_shape, or p.shape when p is whole): the
// inverse of gather_parameter, for loading a checkpoint written under another layout.
Tensor shard_of(const Parameter& p, const Tensor& full);
// The same block, with the full tensor given as consecutive pieces along dimension 0 (BERT's
// query | key | value; each may be a strided view, e.g. of a memory-mapped file), copied into
// `local` (p.shape, the pieces' dtype): only the elements of the block are read.
void copy_shard(const Parameter& p, std::span<const Tensor> rows, Tensor local);

// Where p's block lies in the full parameter: its rows inside it as one piece per segment (none
// for a block wholly in the padding), in the block's row order (core/tensor_slices.h). The rows
// after the last piece, if any, are padding.
std::vector<Piece> pieces_of(const Parameter& p);

// p's block as a sharded save names it alike on every rank holding it (io/save_plan.h): its name
// and pieces, and the bytes of its fp32 state there - weight, momentum and variance (0: a block
// wholly in the padding, not saved).
io::HeldBlockKey save_block_key(const Parameter& p);

// Features laid out [segments][parts][s] (segment-major, so that q, k and v of the same heads
// stay together when a fused weight's rows are split into parts), and a panel [N, segments s]
// holding part `part`'s columns: the panel copied into the features' columns, or filled from them
// (the tensors are handles: what is written lands in the caller's storage).
void copy_part_columns(Tensor panel, Tensor features, int part, int parts, int segments, bool into_features);

// Sums every parameter's gradient over each of its `replicas` groups, one flat all-reduce per
// group. Call once per step, after the last micro-batch's backward.
void reduce_replicated_gradients(std::span<Parameter* const> params);

// The squared L2 norm of all gradients of the model, each block counted once, summed over the
// tensor group (equal on every rank of it).
double squared_gradient_norm(std::span<Parameter* const> params, comm::Communicator& tensor_group);

}  // namespace tidal::nn::tp
