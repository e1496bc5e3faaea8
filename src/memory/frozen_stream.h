// A frozen base streamed from the host (finetune.base_offload = "host"): the parameters of a LoRA
// run's frozen base (nn::Parameter::frozen) live in the host tier, and each module's come into the
// step's memory (the default allocator: the activations' pool, on the device) only while the
// module runs - its forward, its backward (which needs the weight for the input gradient) or its
// recomputed forward - and go again after, as ZeRO-Infinity streams parameters. A parameter in
// NF4 (finetune.base_dtype = "nf4") travels as its codes. So the device holds the adapters, their
// optimizer states and the activations, and of the base only the largest module's weights at a time;
// the cost is one host-to-device copy of the base per forward and per backward.
//
// Invariant: between uses a streamed parameter's `data` (or `nf4`) is its host copy; a module run
// inside another's (an adapter, a block's layers) that uses the same parameter shares the fetched
// copy (a count of the runs in progress).
#pragma once

#include "nn/module.h"
#include "nn/runner.h"
#include "ops/nf4.h"

#include <map>
#include <memory>
#include <span>

namespace tidal::memory {

class FrozenBaseStream final : public nn::ModuleHooks {
 public:
  // `frozen`: held on the host (their data, or their NF4 codes).
  explicit FrozenBaseStream(std::span<nn::Parameter* const> frozen);
  ~FrozenBaseStream() override;
  FrozenBaseStream(const FrozenBaseStream&) = delete;
  FrozenBaseStream& operator=(const FrozenBaseStream&) = delete;

  void before_forward(nn::Module& m) override { fetch(m); }
  void after_forward(nn::Module& m) override { release(m); }
  void before_backward(nn::Module& m) override { fetch(m); }
  void after_backward(nn::Module& m) override { release(m); }
  void after_backward_part(nn::Module& m) override { release(m); }

  // Bytes copied into the step's memory since the last call (the metrics' base_stream_bytes).
  std::int64_t take_streamed_bytes();

 private:
  struct Held {
    Tensor data;                                // the host copy (empty for an NF4 weight)
    std::shared_ptr<const ops::Nf4Weight> nf4;  // the host codes
    int runs = 0;                               // runs in progress that use it
  };
  void fetch(nn::Module& m);
  void release(nn::Module& m);

  std::map<nn::Parameter*, Held> held_;
  std::int64_t streamed_bytes_ = 0;
};

}  // namespace tidal::memory
