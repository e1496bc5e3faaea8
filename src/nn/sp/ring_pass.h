// Passing blocks around the sequence ring (colossal-ai.txt Fig. 8): every rank holds one block
// (its positions' keys and values), and in N steps each rank sees every rank's block, receiving
// the next one from its predecessor while it computes on the current one.
//
// With an accumulator (backward), each rank also adds its share of the gradient of the block
// it holds into a buffer that travels one hop behind the block: created by the owner's
// successor, it visits every other rank and arrives home after N - 1 hops, where the owner
// adds its own share. So every block and every accumulator crosses N - 1 links.
//
// Invariants: all ranks of the ring call pass() in the same order with blocks of one shape;
// blocks use tag kBlockTag and accumulators kAccumulatorTag, so the two streams never match
// each other's receives.
#pragma once

#include "comm/communicator.h"
#include "nn/context.h"

#include <functional>

namespace tidal::nn::sp {

class RingPass {
 public:
  static constexpr int kBlockTag = 1, kAccumulatorTag = 2;

  explicit RingPass(comm::Communicator& ring) : ring_(ring) {}

  // use(block, owner) for the block of every ring position, starting with this rank's `own`;
  // owner is the ring position whose block it is. Buffers come from ctx's activations.
  using Use = std::function<void(const Tensor& block, int owner)>;
  // add(block, owner, acc): acc [shape of own] += this rank's share of the gradient of owner's
  // block.
  using Add = std::function<void(const Tensor& block, int owner, Tensor& acc)>;

  void pass(const Tensor& own, const Context& ctx, const Use& use);
  // As pass(), with add() after use() on each block; returns the sum over all ranks of their
  // shares for this rank's own block.
  Tensor pass(const Tensor& own, const Context& ctx, const Use& use, const Add& add);

 private:
  comm::Communicator& ring_;
};

}  // namespace tidal::nn::sp
