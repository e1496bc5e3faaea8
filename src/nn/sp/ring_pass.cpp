#include "nn/sp/ring_pass.h"

#include "ops/residual.h"

#include <array>

namespace tidal::nn::sp {

void RingPass::pass(const Tensor& own, const Context& ctx, const Use& use) { pass(own, ctx, use, Add{}); }

Tensor RingPass::pass(const Tensor& own, const Context& ctx, const Use& use, const Add& add) {
  const int N = ring_.size(), s = ring_.rank();
  const int next = (s + 1) % N, prev = (s + N - 1) % N;
  const comm::PointToPointOptions block_tag{.tag = kBlockTag}, acc_tag{.tag = kAccumulatorTag};
  // Two receive buffers for blocks and two for accumulators, used in alternate steps: a buffer
  // is refilled only after the send that read it two steps before has completed. All are
  // allocated before anything is sent, so running out of memory leaves no transfer behind.
  std::array<Tensor, 2> blocks, accs;
  std::array<comm::WorkPtr, 2> acc_sent;
  Tensor mine, others;  // this rank's share for its own block; everyone else's
  for (int i = 0; i + 1 < N && i < 2; ++i) blocks[i % 2] = ctx.empty(own.shape(), own.dtype());  // steps 0, 1
  if (add) {
    mine = ctx.empty(own.shape(), own.dtype());
    mine.fill_(0.0f);
    for (int i = 1; i < N && i < 3; ++i) accs[i % 2] = ctx.empty(own.shape(), own.dtype());  // steps 1, 2
    if (N > 1) others = ctx.empty(own.shape(), own.dtype());
  }
  Tensor current = own;
  for (int i = 0; i < N; ++i) {
    const int owner = (s - i + N) % N;
    comm::WorkPtr block_sent, block_received, acc_received;
    Tensor& incoming = blocks[i % 2];
    if (i + 1 < N) {  // the next block travels while this one is used
      block_received = ring_.recv(incoming, prev, block_tag);
      block_sent = ring_.send(current, next, block_tag);
    }
    Tensor& acc = accs[i % 2];
    if (add && i >= 1) {
      if (acc_sent[i % 2]) acc_sent[i % 2]->wait();
      if (i >= 2) acc_received = ring_.recv(acc, prev, acc_tag);  // the predecessor's shares so far
    }
    use(current, owner);
    if (add) {
      if (i == 0) {
        add(current, owner, mine);
      } else {
        if (acc_received) acc_received->wait();
        else acc.fill_(0.0f);  // the first share of this block
        add(current, owner, acc);
        acc_sent[i % 2] = ring_.send(acc, next, acc_tag);
      }
    }
    if (block_sent) {
      block_sent->wait();
      block_received->wait();
      current = incoming;
    }
  }
  if (!add) return {};
  if (N > 1) {  // every other rank's shares of this rank's block, home after N - 1 hops
    ring_.recv(others, prev, acc_tag)->wait();
    ops::accumulate(mine, others);
  }
  for (const comm::WorkPtr& w : acc_sent)
    if (w) w->wait();
  return mine;
}

}  // namespace tidal::nn::sp
