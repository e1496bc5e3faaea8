// The one place modules are run. Hooks registered here are called before and after every
// module's forward and backward: PatrickStar's access / release (patrickstar-v2 Alg. 1-2) and
// ZeRO-3's gather / free hang off these, so no layer has to know about memory management.
#pragma once

#include "core/tensor.h"

#include <span>
#include <vector>

namespace tidal::nn {

class Module;
class Context;
struct Parameter;

class ModuleHooks {
 public:
  virtual ~ModuleHooks() = default;
  virtual void before_forward(Module&) {}
  virtual void after_forward(Module&) {}
  virtual void before_backward(Module&) {}
  // Once per use of the module in a backward: a module run over blocks of rows ends every block
  // but the last with after_backward_part (StepState::more_parts), its gradient not yet whole.
  virtual void after_backward(Module&) {}
  virtual void after_backward_part(Module&) {}
  // Under a zero-bubble schedule's B (StepState::weight_gradients) a backward may leave the
  // gradients of some of m's parameters (`deferred`) to a W pass later: after_input_gradient
  // follows that backward instead of after_backward (the other parameters' gradients are
  // complete), and the W pass runs between before_weight_gradient and after_weight_gradient, whose
  // default is after_backward: m's gradients are all complete then.
  virtual void after_input_gradient(Module&, std::span<Parameter* const> /*deferred*/) {}
  virtual void before_weight_gradient(Module&, std::span<Parameter* const> /*deferred*/) {}
  virtual void after_weight_gradient(Module& m, std::span<Parameter* const> /*deferred*/) { after_backward(m); }
};

class Runner {
 public:
  void add_hooks(ModuleHooks* hooks) { hooks_.push_back(hooks); }
  // m's forward / backward with the hooks around it; a module's adapter (Module::adapter) runs
  // beside it, its output added to m's and its input gradient to m's.
  Tensor forward(Module& m, const Tensor& x, Context& ctx);
  Tensor backward(Module& m, const Tensor& dy, Context& ctx);

 private:
  Tensor run_forward(Module& m, const Tensor& x, Context& ctx);
  Tensor run_backward(Module& m, const Tensor& dy, Context& ctx);

  std::vector<ModuleHooks*> hooks_;
};

}  // namespace tidal::nn
