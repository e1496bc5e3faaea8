// Device-aware operator placement (patrickstar-v1 sec. 8.2): a layer run on the host CPU beside
// a device. Embedding lookups are memory-bound and their tables O(V H): computing them where the
// tables live moves only the activations, O(B T H), between host and device.
//
// The wrapped layer is a transparent child (its parameters keep their names). Its input comes to
// host memory (the batch too, for layers that read it), it runs there with its activations,
// temporaries and parameter gradients in host memory, and its output is copied into the step's
// activation memory; backward brings the output's gradient to the host the same way. Its
// parameters are kept on the host by whoever keeps the model data (engine/model_data.h). Without
// a GPU both sides are host memory and the difference is which allocator counts the bytes.
#pragma once

#include "nn/module.h"

#include <memory>
#include <vector>

namespace tidal::nn {

class OnHost final : public Module {
 public:
  explicit OnHost(std::unique_ptr<Module> layer);

  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  Module* layer_;
};

// The parameters of every layer under `root` that runs on the host.
std::vector<Parameter*> parameters_on_host(Module& root);

}  // namespace tidal::nn
