#include "nn/tp/lm_head.h"

#include "nn/context.h"
#include "nn/tp/mappings.h"

namespace tidal::nn::tp {

VocabParallelLmHead::VocabParallelLmHead(Parameter& table, bool bias, comm::Communicator& group)
    : group_(group), head_(&add_module("", std::make_unique<TiedLmHead>(table, bias))) {}

Tensor VocabParallelLmHead::forward(const Tensor& x, Context& ctx) {
  return ctx.forward(*head_, CopyToGroup::forward(x, group_), 0);
}

Tensor VocabParallelLmHead::backward(const Tensor& dy, Context& ctx) {
  return CopyToGroup::backward(ctx.backward(*head_, dy, 0), group_);
}

}  // namespace tidal::nn::tp
