#include "nn/rotary.h"

#include "core/error.h"
#include "core/gpu.h"
#include "nn/context.h"

namespace tidal::nn {

Rotary::Rotary(int n_head, int n_kv_head, std::int64_t head_dim, const RotaryConfig& cfg, BatchSlice positions)
    : opt_{.n_head = n_head, .n_kv_head = n_kv_head},
      inv_freq_(ops::rotary_inverse_frequencies(head_dim, cfg.theta, cfg.scaling)), positions_(positions) {
  TIDAL_CHECK(head_dim % 2 == 0, "rotary embeddings need an even head size, got {} (model.n_embd / model.n_head)",
              head_dim);
}

std::pair<Tensor, Tensor> Rotary::tables(const Tensor& like, bool by_token) {
  const std::int64_t local = like.dim(1), half = std::int64_t(inv_freq_.size());
  std::vector<PositionRun> runs = positions_.position_runs(local);
  if (by_token) runs = {{0, 0, local * positions_.position_parts}};
  const std::int64_t T = by_token ? runs[0].length : local;
  const std::int64_t first = runs[0].global;  // with T, it fixes the other run
  if (cos_.defined() && cos_.dim(0) == T && first_ == first && by_token_ == by_token &&
      cos_.device() == like.device())
    return {cos_, sin_};
  cos_ = Tensor::empty({T, half}, DType::f32, host_memory_for(like.device()));
  sin_ = Tensor::empty({T, half}, DType::f32, host_memory_for(like.device()));
  first_ = first;
  by_token_ = by_token;
  if (!has_values(like)) return {cos_, sin_};  // a planned step's tables: their shape, no values
  for (const PositionRun& r : runs) {
    Tensor cos = cos_.slice(0, r.local, r.local + r.length), sin = sin_.slice(0, r.local, r.local + r.length);
    ops::rotary_tables(cos, sin, inv_freq_, r.global);
  }
  if (like.device().is_cuda()) {  // copied once, not at every call: the positions of a run rarely change
    cos_ = cos_.clone(gpu_allocator());
    sin_ = sin_.clone(gpu_allocator());
  }
  return {cos_, sin_};
}

Tensor Rotary::rotate(const Tensor& qkv, bool inverse, Context& ctx) {
  const Batch* batch = ctx.state().batch;
  Tensor positions;  // this rank's tokens' positions in their documents, on qkv's device
  if (batch != nullptr && batch->positions.defined()) {
    positions = positions_.of(batch->positions);
    if (positions.device() != qkv.device())
      positions = positions.clone(qkv.device().is_cuda() ? gpu_allocator() : host_allocator());
  }
  const auto [cos, sin] = tables(qkv, positions.defined());
  Tensor out = qkv;  // a handle: rotated in place
  ops::RotaryOptions opt = opt_;
  opt.inverse = inverse;
  opt.positions = positions.defined() ? &positions : nullptr;
  ops::rotary_apply(out, cos, sin, opt);
  return out;
}

Tensor Rotary::forward(const Tensor& qkv, Context& ctx) { return rotate(qkv, false, ctx); }

Tensor Rotary::backward(const Tensor& dqkv, Context& ctx) { return rotate(dqkv, true, ctx); }

}  // namespace tidal::nn
