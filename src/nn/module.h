// Module: a layer with explicit forward and backward. forward(x, ctx) saves what backward needs
// in ctx; backward(dy, ctx) returns dx and accumulates parameter gradients. Composite modules
// run their children through the Runner (ctx.forward / ctx.backward), never by calling a child's
// forward directly, so the hooks of the memory manager and ZeRO see every module.
#pragma once

#include "nn/adapter_split.h"
#include "nn/context.h"
#include "nn/parameter.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace tidal::nn {

// Where a backward whose op always writes a parameter gradient (a norm's scale) puts p's: p.grad,
// or for a frozen p (nn/parameter.h) zeros of its data's dtype among the step's activations, which
// nothing reads.
Tensor gradient_or_scratch(Parameter& p, const Context& ctx);

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  virtual Tensor forward(const Tensor& x, Context& ctx) = 0;
  virtual Tensor backward(const Tensor& dy, Context& ctx) = 0;

  // Full dotted path from the model root ("blocks.3.attn"); set by assign_names().
  const std::string& path() const { return path_; }
  // Parameters owned by this module and its descendants, in registration order.
  std::vector<Parameter*> parameters();
  // Parameters this module itself reads in forward / backward, owned or borrowed (a tied head
  // borrows the embedding's table). The memory manager's access / release act on these.
  virtual std::vector<Parameter*> used_parameters();
  // The used parameters of this module and every module below it, added to `out`.
  void collect_used_parameters(std::set<Parameter*>& out);
  // How many modules here and below read each parameter, added to `users` (a head tied to the
  // embedding's table: the table twice).
  void count_parameter_users(std::map<Parameter*, int>& users);
  const std::vector<std::pair<std::string, std::unique_ptr<Module>>>& children() const { return children_; }

  // Gives every module its path and every owned parameter its full name.
  void assign_names(const std::string& path);

  // A low-rank adapter on this module (nn/lora.h): a module of the same input whose output the
  // Runner adds to this one's, and its input gradient to this one's. Owned as the child "lora" and
  // named under this module's path (attach after assign_names). Null: none.
  void attach_adapter(std::unique_ptr<Module> adapter);
  Module* adapter() const { return adapter_; }
  // How an adapter of this module splits as its tensor mode splits it (nn/adapter_split.h): whole
  // unless a tensor-parallel linear says otherwise.
  virtual AdapterSplit adapter_split() const { return {}; }

 protected:
  Parameter& add_parameter(std::string local_name, Shape shape, ParameterInit init);
  template <class M>
  M& add_module(std::string local_name, std::unique_ptr<M> module) {
    M& ref = *module;
    children_.emplace_back(std::move(local_name), std::move(module));
    return ref;
  }
  const std::vector<std::unique_ptr<Parameter>>& own_parameters() const { return params_; }

 private:
  std::string path_;
  std::vector<std::unique_ptr<Parameter>> params_;
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
  Module* adapter_ = nullptr;
};

}  // namespace tidal::nn
