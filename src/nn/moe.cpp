#include "nn/moe.h"

#include "nn/linear.h"
#include "nn/mlp.h"
#include "ops/cast.h"
#include "ops/expert_rows.h"
#include "ops/residual.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tidal::nn {
namespace {

enum Slot : std::size_t { kGate, kShared, kSharedGate, kExperts };

// What a forward keeps for its backward besides tensors.
struct Kept {
  Routing routing;
  std::vector<double> replica;     // the replica's router statistics (nn/router.h)
  std::vector<float> shared_gate;  // [N]: sigmoid of the shared expert's gate
};

// t's values as fp32 on the host (zeros for a meta tensor).
std::vector<float> host_values(const Tensor& t) {
  std::vector<float> out(std::size_t(t.numel()), 0.0f);
  if (!has_values(t)) return out;
  const Tensor h = on_host(t);
  switch (h.dtype()) {
    case DType::f32: std::copy_n(h.data<float>(), out.size(), out.begin()); break;
    case DType::bf16: std::transform(h.data<bf16>(), h.data<bf16>() + out.size(), out.begin(), [](bf16 v) { return to_float(v); }); break;
    case DType::f16: std::transform(h.data<f16>(), h.data<f16>() + out.size(), out.begin(), [](f16 v) { return to_float(v); }); break;
    case DType::i32: TIDAL_ASSERT(false, "host_values of {}", h.str());
  }
  return out;
}

// A tensor of `shape` among ctx's activations holding `values` (i32 or fp32 by T).
template <class T>
Tensor upload(const std::vector<T>& values, const Shape& shape, Context& ctx) {
  Tensor t = ctx.empty(shape, std::is_same_v<T, float> ? DType::f32 : DType::i32);
  if (!has_values(t)) return t;
  TIDAL_ASSERT(std::int64_t(values.size()) == t.numel(), "{} values for {}", values.size(), t.str());
  Tensor h = on_host(t, false);
  std::copy(values.begin(), values.end(), h.data<T>());
  from_host(t, h);
  return t;
}

// fp32 `values` as a tensor of `dtype` (a gradient in the compute precision).
Tensor upload_as(const std::vector<float>& values, const Shape& shape, DType dtype, Context& ctx) {
  Tensor f = upload(values, shape, ctx);
  if (dtype == DType::f32) return f;
  Tensor t = ctx.empty(shape, dtype);
  ops::cast(t, f);
  return t;
}

std::vector<std::int32_t> identity(std::int64_t n) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

float sigmoid(float g) { return 1.0f / (1.0f + std::exp(-g)); }

}  // namespace

MixtureOfExperts::MixtureOfExperts(std::int64_t n_embd, const MoeConfig& c, ParameterInit init, ParameterInit proj_init,
                                   LayerFactory& layers, std::vector<comm::Communicator*> batch_groups)
    : cfg_(c), C_(n_embd), batch_groups_(std::move(batch_groups)) {
  TIDAL_ASSERT(c.experts > 0 && c.experts_per_token > 0 && c.experts_per_token <= c.experts && c.expert_hidden > 0,
               "a mixture of {} experts, {} a token, width {}", c.experts, c.experts_per_token, c.expert_hidden);
  gate_ = &add_module("gate", std::make_unique<Linear>(n_embd, c.experts, false, init));
  const auto swiglu = [&](std::int64_t hidden) {
    return std::make_unique<Mlp>(n_embd,
                                 MlpConfig{.kind = MlpConfig::Kind::swiglu, .hidden = hidden, .bias = false,
                                           .recompute_activation = c.recompute_activation},
                                 init, proj_init, layers);
  };
  for (int e = 0; e < c.experts; ++e) experts_.push_back(&add_module("experts." + std::to_string(e), swiglu(c.expert_hidden)));
  if (c.shared_hidden > 0) {
    shared_ = &add_module("shared_expert", swiglu(c.shared_hidden));
    shared_gate_ = &add_module("shared_expert_gate", std::make_unique<Linear>(n_embd, 1, false, init));
  }
}

RouterOptions MixtureOfExperts::router_options() const {
  return {.experts = cfg_.experts, .top_k = cfg_.experts_per_token, .normalize = cfg_.normalize_top_k,
          .capacity_factor = cfg_.capacity_factor};
}

std::vector<double> MixtureOfExperts::over_replica(std::vector<double> mine, Device device) const {
  if (batch_groups_.empty()) return mine;
  Tensor sums = Tensor::empty({std::int64_t(mine.size())}, DType::f32, host_memory_for(device));
  const bool values = has_values(sums);  // a planned step issues the sums alone
  if (values) std::copy(mine.begin(), mine.end(), sums.data<float>());
  for (comm::Communicator* g : batch_groups_) g->all_reduce(sums)->wait();
  if (values) std::copy_n(sums.data<float>(), mine.size(), mine.begin());
  return mine;
}

Tensor MixtureOfExperts::forward(const Tensor& x, Context& ctx) {
  TIDAL_ASSERT(x.dim(-1) == C_, "{}: input {} for width {}", path(), x.str(), C_);
  const Tensor x2 = x.reshape({-1, C_});
  const std::int64_t N = x2.dim(0), K = cfg_.experts_per_token;
  const Tensor logits = ctx.forward(*gate_, x2, kGate);  // [N, E]
  Kept kept;
  kept.routing = has_values(logits) ? route(host_values(logits).data(), N, router_options())
                                    : planned_routing(N, router_options());
  kept.replica = over_replica(replica_statistics(kept.routing), x.device());
  const Routing& r = kept.routing;
  const std::int64_t P = r.offset.back();
  const Tensor rows = upload(r.token, {P}, ctx), slot_weights = upload(r.slot_weight, {P}, ctx),
               slots = upload(r.slot, {N, K}, ctx), weights = upload(r.weight, {N, K}, ctx);
  // Each expert on its rows: gathered, run, and put back in slot order.
  Tensor xs = ctx.empty({P, C_}, x.dtype()), ys = ctx.empty({P, C_}, x.dtype());
  ops::gather_rows(xs, x2, rows);
  for (std::size_t e = 0; e < experts_.size(); ++e) {
    const std::int64_t begin = r.offset[e], end = r.offset[e + 1];
    Tensor out = ys.slice(0, begin, end);
    out.copy_from(ctx.forward(*experts_[e], xs.slice(0, begin, end), kExperts + e));
  }
  Tensor y = ctx.empty(x.shape(), x.dtype()), y2 = y.reshape({N, C_});
  ops::combine_rows(y2, ys, slots, weights);
  ctx.saved = {ys, slots, rows, slot_weights};
  if (shared_ != nullptr) {  // y += sigmoid(shared_gate(x)) shared(x)
    const Tensor s = ctx.forward(*shared_, x2, kShared);
    const std::vector<float> g = host_values(ctx.forward(*shared_gate_, x2, kSharedGate));
    kept.shared_gate.resize(g.size());
    std::transform(g.begin(), g.end(), kept.shared_gate.begin(), sigmoid);
    const Tensor each = upload(identity(N), {N, 1}, ctx), scale = upload(kept.shared_gate, {N, 1}, ctx);
    Tensor gated = ctx.empty({N, C_}, x.dtype());
    ops::combine_rows(gated, s, each, scale);
    ops::accumulate(y2, gated);
    ctx.saved.insert(ctx.saved.end(), {s, each, scale});
  }
  ctx.kept = std::move(kept);
  return y;
}

Tensor MixtureOfExperts::backward(const Tensor& dy, Context& ctx) {
  TIDAL_ASSERT(ctx.saved.size() >= 4 && ctx.kept.has_value(), "{}: backward without its forward", path());
  const Kept& kept = std::any_cast<const Kept&>(ctx.kept);
  const Routing& r = kept.routing;
  const Tensor& ys = ctx.saved[0];
  const Tensor& slots = ctx.saved[1];
  const Tensor& rows = ctx.saved[2];
  const Tensor& slot_weights = ctx.saved[3];
  const Tensor dy2 = dy.reshape({-1, C_});
  const std::int64_t N = dy2.dim(0), P = r.offset.back(), E = cfg_.experts, K = cfg_.experts_per_token;
  // The weights' gradient, then each expert's rows' (dy times their weight), experts in reverse.
  Tensor dweights = ctx.empty({N, K}, DType::f32);
  ops::slot_dots(dweights, dy2, ys, slots);
  Tensor dys = ctx.empty({P, C_}, dy.dtype()), dxs = ctx.empty({P, C_}, dy.dtype());
  ops::gather_rows(dys, dy2, rows, slot_weights);
  for (std::size_t e = experts_.size(); e-- > 0;) {
    const std::int64_t begin = r.offset[e], end = r.offset[e + 1];
    Tensor out = dxs.slice(0, begin, end);
    out.copy_from(ctx.backward(*experts_[e], dys.slice(0, begin, end), kExperts + e));
  }
  Tensor dx = ctx.empty(dy.shape(), dy.dtype()), dx2 = dx.reshape({N, C_});
  ops::combine_rows(dx2, dxs, slots);
  // The router: the weights' gradient and the auxiliary losses' through the softmax.
  const StepState& state = ctx.state();
  const double scale = double(state.loss_weight) * state.gradient_scale / cfg_.moe_layers;
  std::vector<float> dlogits(std::size_t(N * E), 0.0f);
  if (has_values(dweights))
    dlogits = router_backward(r, router_options(), host_values(dweights).data(), kept.replica,
                              scale * cfg_.aux_loss_coef, scale * cfg_.z_loss_coef);
  ops::accumulate(dx2, ctx.backward(*gate_, upload_as(dlogits, {N, E}, dy.dtype(), ctx), kGate).reshape({N, C_}));
  if (shared_ != nullptr) {
    const Tensor& s = ctx.saved[4];
    const Tensor& each = ctx.saved[5];
    const Tensor& gate = ctx.saved[6];
    Tensor dgate = ctx.empty({N, 1}, DType::f32), ds = ctx.empty({N, C_}, dy.dtype());
    ops::slot_dots(dgate, dy2, s, each);
    ops::gather_rows(ds, dy2, each.reshape({N}), gate.reshape({N}));
    std::vector<float> dg = host_values(dgate);
    for (std::size_t n = 0; n < dg.size(); ++n) dg[n] *= kept.shared_gate[n] * (1.0f - kept.shared_gate[n]);
    ops::accumulate(dx2, ctx.backward(*shared_, ds, kShared));
    ops::accumulate(dx2, ctx.backward(*shared_gate_, upload_as(dg, {N, 1}, dy.dtype(), ctx), kSharedGate));
  }
  if (state.experts != nullptr) {  // once a micro-batch: backward runs once, a recomputed forward twice
    ExpertLoad& load = state.experts->layers[cfg_.layer];
    load.tokens.resize(std::size_t(E), 0.0);
    for (std::int64_t e = 0; e < E; ++e) load.tokens[std::size_t(e)] += double(r.kept[std::size_t(e)]);
    load.dropped += r.dropped;
    const RouterLosses losses = router_losses(kept.replica, cfg_.experts);
    load.balance_loss += state.loss_weight * losses.balance;
    load.z_loss += state.loss_weight * losses.z;
    state.experts->loss +=
        state.loss_weight * (cfg_.aux_loss_coef * losses.balance + cfg_.z_loss_coef * losses.z) / cfg_.moe_layers;
  }
  ctx.saved.clear();
  ctx.kept.reset();
  return dx;
}

}  // namespace tidal::nn
