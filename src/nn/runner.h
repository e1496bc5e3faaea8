// The one place modules are run. Hooks registered here are called before and after every
// module's forward and backward: PatrickStar's access / release (patrickstar-v2 Alg. 1-2) and
// ZeRO-3's gather / free hang off these, so no layer has to know about memory management.
#pragma once

#include "core/tensor.h"

#include <vector>

namespace tidal::nn {

class Module;
class Context;

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
