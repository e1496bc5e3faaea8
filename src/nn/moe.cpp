#include "nn/moe.h"

#include "comm/all_to_all.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "ops/cast.h"
#include "ops/expert_rows.h"
#include "ops/residual.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

namespace tidal::nn {
namespace {

enum MoeSlot : std::size_t { kGate, kShared, kSharedGate, kExperts };

constexpr int kExchangeTag = 4;  // apart from the sequence ring's and Ulysses' transfers (nn/sp/)

}  // namespace

// Where expert parallelism moves rows: this rank's slots go to the expert group's ranks in blocks
// (rank q's experts' slots are contiguous), and the rows that come in from each rank are put in
// this rank's experts' batches, each expert's rows in rank order, padded.
struct MixtureOfExperts::Exchange {
  std::vector<std::int64_t> sent;      // [G]: slots sent to each rank (this rank's for its experts)
  std::vector<std::int64_t> received;  // [G]: rows received from each rank
  std::vector<std::int64_t> offset;    // [El + 1]: this rank's experts' batches in the rows L
  std::vector<std::int32_t> place;     // [L]: each batch row's received row (ranks in order), -1 padding
  std::vector<std::int32_t> back;      // [received]: each received row's batch row
};

namespace {

// What a forward keeps for its backward besides tensors.
struct Kept {
  std::shared_ptr<const Routing> routing;  // a run's, or a plan's (shared by its blocks)
  std::vector<double> replica;     // the replica's router statistics (nn/router.h)
  std::vector<float> shared_gate;  // [N]: sigmoid of the shared expert's gate
  std::optional<MixtureOfExperts::Exchange> exchange;  // under expert parallelism
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
    case DType::i32:
    case DType::u8: TIDAL_ASSERT(false, "host_values of {}", h.str());
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
                                   LayerFactory& layers, std::vector<comm::Communicator*> batch_groups,
                                   comm::Communicator* expert_group)
    : cfg_(c), C_(n_embd), batch_groups_(std::move(batch_groups)),
      expert_group_(expert_group != nullptr && expert_group->size() > 1 ? expert_group : nullptr),
      whole_linears_(layers.feature_parts() == 1) {
  TIDAL_ASSERT(c.experts > 0 && c.experts_per_token > 0 && c.experts_per_token <= c.experts && c.expert_hidden > 0,
               "a mixture of {} experts, {} a token, width {}", c.experts, c.experts_per_token, c.expert_hidden);
  gate_ = &add_module("gate", std::make_unique<Linear>(n_embd, c.experts, false, init));
  const auto swiglu = [&](std::int64_t hidden) {
    return std::make_unique<Mlp>(n_embd,
                                 MlpConfig{.kind = MlpConfig::Kind::swiglu, .hidden = hidden, .bias = false,
                                           .recompute_activation = c.recompute_activation},
                                 init, proj_init, layers);
  };
  const int G = expert_group_ ? expert_group_->size() : 1;
  TIDAL_CHECK(c.experts % G == 0, "{} experts over an expert group of {} ranks: parallel.expert must divide model.experts",
              c.experts, G);
  first_expert_ = expert_group_ ? expert_group_->rank() * (c.experts / G) : 0;
  for (int e = first_expert_; e < first_expert_ + c.experts / G; ++e) {
    experts_.push_back(&add_module("experts." + std::to_string(e), swiglu(c.expert_hidden)));
    if (expert_group_)
      for (Parameter* p : experts_.back()->parameters()) p->expert_group = expert_group_;
  }
  if (c.shared_hidden > 0) {
    shared_ = &add_module("shared_expert", swiglu(c.shared_hidden));
    shared_gate_ = &add_module("shared_expert_gate", std::make_unique<Linear>(n_embd, 1, false, init));
  }
}

RouterOptions MixtureOfExperts::router_options() const {
  return {.experts = cfg_.experts, .top_k = cfg_.experts_per_token, .normalize = cfg_.normalize_top_k,
          .capacity_factor = cfg_.capacity_factor, .pad = expert_group_ == nullptr};
}

// The counts first: each rank tells each other how many rows of each of its experts it sends.
MixtureOfExperts::Exchange MixtureOfExperts::plan_exchange(const Routing& r, Device device) const {
  comm::Communicator& group = *expert_group_;
  const int G = group.size(), El = int(experts_.size());
  Exchange x;
  std::vector<Tensor> send, recv;
  Allocator& host = host_memory_for(device);
  for (int q = 0; q < G; ++q) {
    Tensor counts = Tensor::empty({El}, DType::i32, host);
    if (has_values(counts))
      for (int j = 0; j < El; ++j) counts.data<std::int32_t>()[j] = std::int32_t(r.kept[std::size_t(q * El + j)]);
    x.sent.push_back(r.offset[std::size_t((q + 1) * El)] - r.offset[std::size_t(q * El)]);
    send.push_back(counts);
    recv.push_back(Tensor::empty({El}, DType::i32, host));
  }
  comm::all_to_all(group, send, recv, kExchangeTag);
  // from[s][j]: rows of this rank's expert j from rank s (a plan assumes every rank sends what
  // this one does: the planned routing is the same everywhere).
  std::vector<std::vector<std::int64_t>> from(static_cast<std::size_t>(G),
                                              std::vector<std::int64_t>(static_cast<std::size_t>(El)));
  for (int s = 0; s < G; ++s)
    for (int j = 0; j < El; ++j)
      from[std::size_t(s)][std::size_t(j)] = has_values(recv[std::size_t(s)]) ? recv[std::size_t(s)].data<std::int32_t>()[j]
                                                                             : r.kept[std::size_t(first_expert_ + j)];
  std::vector<std::int64_t> start(std::size_t(G), 0);  // each rank's first row among the received
  for (int s = 0; s < G; ++s) {
    x.received.push_back(std::accumulate(from[std::size_t(s)].begin(), from[std::size_t(s)].end(), std::int64_t(0)));
    if (s + 1 < G) start[std::size_t(s + 1)] = start[std::size_t(s)] + x.received.back();
  }
  x.offset.assign(std::size_t(El + 1), 0);
  x.back.assign(std::size_t(start.back() + x.received.back()), 0);
  for (int j = 0; j < El; ++j) {
    std::int64_t rows = 0;
    for (int s = 0; s < G; ++s) {
      // Rank s's rows of expert j: after its rows of experts 0 .. j-1.
      std::int64_t at = start[std::size_t(s)];
      for (int i = 0; i < j; ++i) at += from[std::size_t(s)][std::size_t(i)];
      for (std::int64_t n = 0; n < from[std::size_t(s)][std::size_t(j)]; ++n) {
        x.back[std::size_t(at + n)] = std::int32_t(x.offset[std::size_t(j)] + rows);
        x.place.push_back(std::int32_t(at + n));
        ++rows;
      }
    }
    const std::int64_t padded = padded_rows(rows);
    x.place.insert(x.place.end(), std::size_t(padded - rows), -1);
    x.offset[std::size_t(j + 1)] = x.offset[std::size_t(j)] + padded;
  }
  return x;
}

namespace {

// Rank q of `group` gets rows [sum of out[< q], + out[q]) of `from`; rank s's rows land in rows
// [sum of in[< s], + in[s]) of the returned tensor.
Tensor exchange_rows(comm::Communicator& group, const Tensor& from, const std::vector<std::int64_t>& out,
                     const std::vector<std::int64_t>& in, Context& ctx) {
  Tensor to = ctx.empty({std::accumulate(in.begin(), in.end(), std::int64_t(0)), from.dim(1)}, from.dtype());
  std::vector<Tensor> send, recv;
  std::int64_t at = 0, got = 0;
  for (std::size_t q = 0; q < out.size(); ++q) {
    send.push_back(from.slice(0, at, at + out[q]));
    recv.push_back(to.slice(0, got, got + in[q]));
    at += out[q];
    got += in[q];
  }
  comm::all_to_all(group, send, recv, kExchangeTag);
  return to;
}

}  // namespace

Tensor MixtureOfExperts::to_experts(const Tensor& slots, const Exchange& x, Context& ctx) const {
  const Tensor in = exchange_rows(*expert_group_, slots, x.sent, x.received, ctx);
  Tensor rows = ctx.empty({std::int64_t(x.place.size()), C_}, slots.dtype());
  ops::gather_rows(rows, in, upload(x.place, {std::int64_t(x.place.size())}, ctx));
  return rows;
}

Tensor MixtureOfExperts::from_experts(const Tensor& rows, const Exchange& x, Context& ctx) const {
  const std::int64_t received = std::int64_t(x.back.size());
  Tensor out = ctx.empty({received, C_}, rows.dtype());
  ops::gather_rows(out, rows, upload(x.back, {received}, ctx));
  return exchange_rows(*expert_group_, out, x.received, x.sent, ctx);
}

bool MixtureOfExperts::concurrent(const Tensor& x, const StepState& state, bool backward) const {
  const std::size_t threads = std::size_t(omp_get_max_threads());
  return whole_linears_ && x.device().is_cpu() && threads > 1 && experts_.size() >= 2 * threads &&
         state.activations->capacity() == std::numeric_limits<std::size_t>::max() &&
         !(backward && (state.weight_gradients != nullptr || state.more_parts));
}

void MixtureOfExperts::run_experts(const Tensor& in, Tensor& out, const std::vector<std::int64_t>& offset,
                                   Context& ctx, bool backward) const {
  const std::size_t E = experts_.size();
  const auto rows = [&](std::size_t e, const Tensor& t) { return t.slice(0, offset[e], offset[e + 1]); };
  if (!concurrent(in, ctx.state(), backward)) {  // backward: the experts in reverse
    for (std::size_t i = 0; i < E; ++i) {
      const std::size_t e = backward ? E - 1 - i : i;
      Tensor o = rows(e, out);
      o.copy_from(backward ? ctx.backward(*experts_[e], rows(e, in), kExperts + e)
                           : ctx.forward(*experts_[e], rows(e, in), kExperts + e));
    }
    return;
  }
  // The largest batches first: the threads take them as they come free.
  std::vector<std::size_t> order(E);
  std::iota(order.begin(), order.end(), std::size_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return offset[a + 1] - offset[a] > offset[b + 1] - offset[b]; });
  std::vector<Module*> modules;
  std::vector<Tensor> inputs;
  std::vector<std::size_t> slots;
  for (std::size_t e : order) {
    modules.push_back(experts_[e]);
    inputs.push_back(rows(e, in));
    slots.push_back(kExperts + e);
  }
  const auto done = [&](std::size_t i, const Tensor& y) {
    Tensor o = rows(order[i], out);
    o.copy_from(y);
  };
  if (backward) ctx.backward_concurrently(modules, inputs, slots, done);
  else ctx.forward_concurrently(modules, inputs, slots, done);
}

Tensor MixtureOfExperts::forward(const Tensor& x, Context& ctx) {
  TIDAL_ASSERT(x.dim(-1) == C_, "{}: input {} for width {}", path(), x.str(), C_);
  const Tensor x2 = x.reshape({-1, C_});
  const std::int64_t N = x2.dim(0), K = cfg_.experts_per_token;
  const Tensor logits = ctx.forward(*gate_, x2, kGate);  // [N, E]
  Kept kept;
  kept.routing = has_values(logits)
                     ? std::make_shared<const Routing>(route(host_values(logits).data(), N, router_options()))
                     : planned_routing(N, router_options());
  kept.replica = sum_over_groups(replica_statistics(*kept.routing), batch_groups_, x.device());
  const Routing& r = *kept.routing;
  const std::int64_t P = r.offset.back();
  const Tensor rows = upload(r.token, {P}, ctx), slot_weights = upload(r.slot_weight, {P}, ctx),
               slots = upload(r.slot, {N, K}, ctx), weights = upload(r.weight, {N, K}, ctx);
  // Each expert on its rows: gathered (and sent to its rank), run, and put back in slot order.
  Tensor xs = ctx.empty({P, C_}, x.dtype());
  ops::gather_rows(xs, x2, rows);
  if (expert_group_) kept.exchange = plan_exchange(r, x.device());
  const std::vector<std::int64_t>& offset = kept.exchange ? kept.exchange->offset : r.offset;
  const Tensor xl = kept.exchange ? to_experts(xs, *kept.exchange, ctx) : xs;
  Tensor yl = ctx.empty(xl.shape(), x.dtype());
  run_experts(xl, yl, offset, ctx, false);
  const Tensor ys = kept.exchange ? from_experts(yl, *kept.exchange, ctx) : yl;
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
  const Routing& r = *kept.routing;
  const Tensor& ys = ctx.saved[0];
  const Tensor& slots = ctx.saved[1];
  const Tensor& rows = ctx.saved[2];
  const Tensor& slot_weights = ctx.saved[3];
  const Tensor dy2 = dy.reshape({-1, C_});
  const std::int64_t N = dy2.dim(0), P = r.offset.back(), E = cfg_.experts, K = cfg_.experts_per_token;
  // The weights' gradient, then each expert's rows' (dy times their weight).
  Tensor dweights = ctx.empty({N, K}, DType::f32);
  ops::slot_dots(dweights, dy2, ys, slots);
  Tensor dys = ctx.empty({P, C_}, dy.dtype());
  ops::gather_rows(dys, dy2, rows, slot_weights);
  const std::vector<std::int64_t>& offset = kept.exchange ? kept.exchange->offset : r.offset;
  const Tensor dyl = kept.exchange ? to_experts(dys, *kept.exchange, ctx) : dys;
  Tensor dxl = ctx.empty(dyl.shape(), dy.dtype());
  run_experts(dyl, dxl, offset, ctx, true);
  const Tensor dxs = kept.exchange ? from_experts(dxl, *kept.exchange, ctx) : dxl;
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
    if (kept.exchange)
      for (int q = 0; q < expert_group_->size(); ++q)
        if (q != expert_group_->rank()) {
          state.experts->rows_sent += double(kept.exchange->sent[std::size_t(q)]);
          state.experts->rows_received += double(kept.exchange->received[std::size_t(q)]);
        }
  }
  ctx.saved.clear();
  ctx.kept.reset();
  return dx;
}

}  // namespace tidal::nn
