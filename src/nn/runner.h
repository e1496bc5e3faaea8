// The one place modules are run. Hooks registered here are called before and after every
// module's forward and backward: PatrickStar's access / release (patrickstar-v2 Alg. 1-2) and
// ZeRO-3's gather / free hang off these, so no layer has to know about memory management.
#pragma once

#include "core/tensor.h"

#include <cstddef>
#include <functional>
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

  // Modules that share nothing and talk to no other rank (a mixture's experts, nn/moe.h), run at
  // once on the host's threads: one parallel region in place of each module's ops' own, each
  // thread running whole modules (module i on xs[i] in ctxs[i]) with their ops on that thread
  // alone (OpenMP's nested regions, as attention's blocks), and handing module i's output to
  // done(i, y) there. Modules are taken in the given order (largest first balances the threads).
  // The hooks hear every module of the trees, parents first, before any runs, and after all have
  // run in reverse, on this thread: each module of a tree must run once (an MLP's linears and
  // activation do), and the hooks hold every tree's parameters at once. Not under a zero-bubble B
  // (StepState::weight_gradients) or over blocks of rows (more_parts): those run one at a time.
  using Done = std::function<void(std::size_t i, const Tensor& y)>;
  void forward_concurrently(std::span<Module* const> ms, std::span<const Tensor> xs, std::span<Context* const> ctxs,
                            const Done& done);
  void backward_concurrently(std::span<Module* const> ms, std::span<const Tensor> dys,
                             std::span<Context* const> ctxs, const Done& done);

 private:
  Tensor run_forward(Module& m, const Tensor& x, Context& ctx);
  Tensor run_backward(Module& m, const Tensor& dy, Context& ctx);
  void run_concurrently(std::span<Module* const> ms, std::span<const Tensor> ins, std::span<Context* const> ctxs,
                        const Done& done, bool backward);

  std::vector<ModuleHooks*> hooks_;
  bool hooks_held_ = false;  // inside a concurrent run, whose hooks are called around it
};

}  // namespace tidal::nn
