#include "pipeline/engine.h"

#include "nn/moe.h"
#include "nn/runner.h"
#include "nn/tp/shard.h"
#include "pipeline/partition.h"
#include "pipeline/stage_costs.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <numeric>
#include <optional>

namespace tidal::pipeline {
namespace {

constexpr int kHeader = 9;  // ndim, then up to 7 extents, then the element type

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

PipelineEngine::PipelineEngine(models::Model& model, parallel::ParallelContext& pc, const PipelineOptions& options)
    : model_(model),
      pc_(pc),
      pipeline_(pc.group(parallel::GroupKind::pipeline)),
      tensor_(pc.group(parallel::GroupKind::tensor)),
      kind_(options.schedule),
      stages_(pc.layout().spec().pipeline),
      stage_(pc.coordinates().pipeline),
      chunks_(options.chunks),
      scatter_gather_(options.scatter_gather && stages_ > 1 && pc.layout().spec().mode == parallel::TensorMode::d1 &&
                      tensor_.size() > 1),
      held_(options.held_weight_gradients) {
  TIDAL_ASSERT(held_.empty() || int(held_.size()) == stages_, "{} counts of held W's for {} stages", held_.size(),
               stages_);
  model_.assign_names("");
  const std::vector<int> units = unit_bounds(model_);
  const std::vector<double> costs =
      options.unit_costs.empty() ? unit_costs(model_, PartitionBy::layers) : options.unit_costs;
  TIDAL_ASSERT(costs.size() + 1 == units.size(), "{} unit costs for {} units", costs.size(), units.size() - 1);
  const std::vector<int> split = partition(costs, stages_ * chunks_);
  for (std::size_t vs = 0; vs < split.size(); ++vs) {
    bounds_.push_back(units[std::size_t(split[vs])]);
    if (vs + 1 < split.size())
      stage_costs_.push_back(std::accumulate(costs.begin() + split[vs], costs.begin() + split[vs + 1], 0.0));
  }
  // This rank's parameters, each with the model chunk whose layers use it, in the model's order.
  for (int c = 0; c < chunks_; ++c) {
    const int vs = virtual_stage(c);
    std::set<nn::Parameter*> used;
    for (int i = bounds_[vs]; i < bounds_[vs + 1]; ++i) model_.layers()[std::size_t(i)]->collect_used_parameters(used);
    for (const nn::Parameter* p : used) chunk_of_.emplace(p, c);  // ZB-V's rank 0: a tied table in both
  }
  for (nn::Parameter* p : model_.parameters())
    if (chunk_of_.count(p)) (p->frozen ? frozen_ : params_).push_back(p);
  for (int s = 0; s < stages_; ++s) {
    if (s == stage_) continue;
    for (nn::Parameter* p : parameters_of(s))
      if (std::find(params_.begin(), params_.end(), p) != params_.end()) tied_.insert(p);
  }
  TIDAL_ASSERT(tied_.empty() || stage_ == 0 || stage_ == stages_ - 1,
               "pipeline stage {} shares parameters with another stage; only the end stages may", stage_);
}

std::vector<nn::Parameter*> PipelineEngine::parameters_of(int stage) const {
  std::set<nn::Parameter*> used;
  for (int c = 0; c < chunks_; ++c) {
    const int vs = pipeline::virtual_stage(kind_, stages_, stage, c);
    for (int i = bounds_[vs]; i < bounds_[vs + 1]; ++i) model_.layers()[std::size_t(i)]->collect_used_parameters(used);
  }
  std::vector<nn::Parameter*> out;
  for (nn::Parameter* p : model_.parameters())
    if (used.count(p) && !p->frozen) out.push_back(p);
  return out;
}

int PipelineEngine::chunk_of(const nn::Parameter& p) const {
  const auto it = chunk_of_.find(&p);
  TIDAL_ASSERT(it != chunk_of_.end(), "{} is not used by this rank's model chunks", p.name);
  return it->second;
}

std::vector<nn::Module*> PipelineEngine::layers() const {
  std::vector<nn::Module*> out;
  for (int c = 0; c < chunks_; ++c) {
    const int vs = virtual_stage(c);
    for (int i = bounds_[vs]; i < bounds_[vs + 1]; ++i) out.push_back(model_.layers()[std::size_t(i)]);
  }
  return out;
}

std::vector<int> PipelineEngine::layer_chunks() const {
  std::vector<int> out;
  for (int c = 0; c < chunks_; ++c) {
    const int vs = virtual_stage(c);
    out.insert(out.end(), std::size_t(bounds_[vs + 1] - bounds_[vs]), c);
  }
  return out;
}

void PipelineEngine::materialize(std::uint64_t seed, Allocator& alloc) {
  for (nn::Parameter* p : params_) nn::materialize(*p, seed, alloc);
}

void PipelineEngine::zero_grad() {
  for (nn::Parameter* p : params_) p->grad.zero_();
}

Tensor PipelineEngine::run_forward(int vs, Tensor x, nn::Context& ctx) {
  for (int i = bounds_[vs]; i < bounds_[vs + 1]; ++i) x = ctx.forward(*model_.layers()[std::size_t(i)], x, std::size_t(i));
  return x;
}

Tensor PipelineEngine::run_backward(int vs, Tensor dy, nn::Context& ctx) {
  for (int i = bounds_[vs + 1]; i-- > bounds_[vs];) dy = ctx.backward(*model_.layers()[std::size_t(i)], dy, std::size_t(i));
  return dy;
}

std::int64_t PipelineEngine::payload_elements(std::int64_t n) const {
  return scatter_gather_ && n % tensor_.size() == 0 ? n / tensor_.size() : n;
}

void PipelineEngine::send(const Tensor& t, Stream to) {
  TIDAL_ASSERT(t.ndim() < kHeader - 1, "pipeline transfer of {}", t.str());
  const int dst = rank_of(to.virtual_stage), tag = tag_of(to);
  if (dst == stage_) {  // ZB-V's turn at the last rank: the next virtual stage is this rank's
    TIDAL_ASSERT(!handed_.count(to), "two transfers in flight on one stream within a rank");
    handed_[to] = t;
    return;
  }
  auto [it, first] = sent_shapes_.try_emplace(to, Message{t.shape(), t.dtype()});
  if (first) {
    Tensor header = Tensor::zeros({kHeader}, DType::i32, host_allocator());  // read by the host
    header.data<std::int32_t>()[0] = std::int32_t(t.ndim());
    for (int d = 0; d < t.ndim(); ++d) header.data<std::int32_t>()[d + 1] = std::int32_t(t.dim(d));
    header.data<std::int32_t>()[kHeader - 1] = std::int32_t(t.dtype());
    sends_.push_back(pipeline_.send(header, dst, {.tag = tag}));
  } else {
    TIDAL_ASSERT(it->second.shape == t.shape() && it->second.dtype == t.dtype(),
                 "pipeline micro-batches of one step differ: {} after {} {}", t.str(), dtype_name(it->second.dtype),
                 it->second.shape.str());
  }
  const Tensor whole = (t.is_contiguous() ? t : t.clone()).reshape({t.numel()});
  const std::int64_t part = payload_elements(t.numel());
  const std::int64_t begin = part == t.numel() ? 0 : tensor_.rank() * part;
  sends_.push_back(pipeline_.send(whole.slice(0, begin, begin + part), dst, {.tag = tag}));
}

void PipelineEngine::post_receive(Stream s, Allocator& alloc) {
  const Message& m = received_shapes_.at(s);
  Tensor buffer = Tensor::empty({payload_elements(m.shape.numel())}, m.dtype, alloc);
  comm::WorkPtr work = pipeline_.recv(buffer, source_of(s), {.tag = tag_of(s)});
  pending_[s] = {std::move(buffer), std::move(work)};
}

Tensor PipelineEngine::receive(Stream s, Allocator& alloc) {
  if (const auto it = handed_.find(s); it != handed_.end()) {
    Tensor t = std::move(it->second);
    handed_.erase(it);
    return t;
  }
  const auto t0 = Clock::now();
  if (!received_shapes_.count(s)) {
    Tensor header = Tensor::empty({kHeader}, DType::i32, host_allocator());
    pipeline_.recv(header, source_of(s), {.tag = tag_of(s)})->wait();
    Shape shape;
    for (int d = 0; d < header.data<std::int32_t>()[0]; ++d) shape.push_back(header.data<std::int32_t>()[d + 1]);
    received_shapes_[s] = {shape, DType(header.data<std::int32_t>()[kHeader - 1])};
  }
  if (!pending_.count(s)) post_receive(s, alloc);
  PendingReceive r = std::move(pending_.at(s));
  pending_.erase(s);
  r.work->wait();
  const Shape& shape = received_shapes_.at(s).shape;
  Tensor out = r.buffer;
  if (r.buffer.numel() != shape.numel()) {  // a scatter-gathered part: the tensor group holds the rest
    out = Tensor::empty({shape.numel()}, r.buffer.dtype(), alloc);
    tensor_.all_gather(out, r.buffer)->wait();
  }
  profile_.wait_seconds += seconds_since(t0);
  return out.reshape(shape);
}

void PipelineEngine::begin_call() {
  TIDAL_ASSERT(sends_.empty() && pending_.empty() && handed_.empty(), "a pipeline call began with transfers in flight");
  sent_shapes_.clear();
  received_shapes_.clear();
}

void PipelineEngine::finish_sends() {
  for (const comm::WorkPtr& w : sends_) w->wait();
  sends_.clear();
}

std::optional<PipelineEngine::Stream> PipelineEngine::input_of(const Action& a) const {
  const int vs = virtual_stage(a.chunk);
  if (a.kind == Action::forward) return vs == 0 ? std::nullopt : std::optional<Stream>({vs, false});
  if (a.kind == Action::weight_gradient) return std::nullopt;
  return vs == stages_ * chunks_ - 1 ? std::nullopt : std::optional<Stream>({vs, true});
}

std::vector<Action> PipelineEngine::actions_of(int micro_batches) {
  if (kind_ == ScheduleKind::zb_h1)
    profile_.held_weight_gradients = held_.empty() ? stage_ : std::min(held_[std::size_t(stage_)], stage_);
  return schedule(kind_, stages_, stage_, micro_batches, chunks_, profile_.held_weight_gradients);
}

double PipelineEngine::train(const std::vector<MicroBatch>& micro_batches, const nn::StepState& state,
                             const ActionHooks& hooks) {
  const auto start = Clock::now();
  profile_ = {};
  begin_call();
  Call call{.micro_batches = micro_batches, .hooks = hooks,
            .alloc = state.activations ? *state.activations : host_allocator()};
  for (const MicroBatch& mb : micro_batches) {
    nn::StepState st = state;
    st.batch = mb.batch;
    st.first_sample = mb.first_sample;
    st.loss_weight = mb.loss_scale;
    st.gradient_scale = mb.gradient_scale;
    call.states.push_back(st);
  }
  const std::vector<Action> actions = actions_of(int(micro_batches.size()));
  for (std::size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    Tensor input;
    const double waited = profile_.wait_seconds;
    if (const auto s = input_of(a)) input = receive(*s, call.alloc);
    (a.kind == Action::forward ? profile_.forward_wait_seconds : profile_.backward_wait_seconds) +=
        profile_.wait_seconds - waited;
    // The next action's input, when its size is known, is received while this one computes.
    if (i + 1 < actions.size())
      if (const auto next = input_of(actions[i + 1]); next && received_shapes_.count(*next) && !pending_.count(*next))
        post_receive(*next, call.alloc);
    if (a.kind == Action::forward) forward_action(call, a, input);
    else if (a.kind == Action::weight_gradient) weight_action(call, a);
    else backward_action(call, a, input);
  }
  finish_sends();
  if (state.experts != nullptr) call.loss += state.experts->loss;  // the routers' losses, on their stages
  Tensor total = Tensor::full({1}, float(call.loss));
  pipeline_.all_reduce(total)->wait();  // only the last stage holds it
  profile_.seconds = seconds_since(start);
  return double(total.item());
}

void PipelineEngine::forward_action(Call& call, const Action& a, const Tensor& input) {
  const int vs = virtual_stage(a.chunk), last = stages_ * chunks_ - 1;
  const MicroBatch& mb = call.micro_batches[std::size_t(a.micro_batch)];
  if (call.hooks.before_forward) call.hooks.before_forward(a);
  auto ctx = std::make_unique<nn::Context>(call.states[std::size_t(a.micro_batch)]);
  const auto t0 = Clock::now();
  const Tensor y = run_forward(vs, vs == 0 ? model_.input(*mb.batch) : input, *ctx);
  if (vs == last) call.loss += double(y.item()) * mb.loss_scale;
  const double seconds = seconds_since(t0);
  profile_.compute_seconds += seconds;
  profile_.forward_seconds += seconds;
  if (vs != last) send(y, {vs + 1, false});
  call.live[{a.micro_batch, a.chunk}] = std::move(ctx);
}

void PipelineEngine::backward_action(Call& call, const Action& a, const Tensor& input) {
  const int vs = virtual_stage(a.chunk), last = stages_ * chunks_ - 1;
  const MicroBatch& mb = call.micro_batches[std::size_t(a.micro_batch)];
  auto it = call.live.find({a.micro_batch, a.chunk});
  TIDAL_ASSERT(it != call.live.end(), "backward of micro-batch {} before its forward", a.micro_batch);
  if (call.hooks.before_backward) call.hooks.before_backward(a);
  nn::StepState& st = call.states[std::size_t(a.micro_batch)];
  if (a.kind == Action::input_gradient) st.weight_gradients = &call.weight_gradients[{a.micro_batch, a.chunk}];
  const auto t0 = Clock::now();
  const Tensor dx = run_backward(vs, vs == last ? Tensor::full({1}, mb.loss_scale * mb.gradient_scale) : input, *it->second);
  const double seconds = seconds_since(t0);
  profile_.compute_seconds += seconds;
  profile_.backward_seconds += seconds;
  st.weight_gradients = nullptr;
  if (vs > 0) send(dx, {vs - 1, true});
  call.live.erase(it);
  if (call.hooks.after_backward && a.kind == Action::backward) call.hooks.after_backward(a);
}

void PipelineEngine::weight_action(Call& call, const Action& a) {
  auto it = call.weight_gradients.find({a.micro_batch, a.chunk});
  TIDAL_ASSERT(it != call.weight_gradients.end(), "W of micro-batch {} before its B", a.micro_batch);
  TIDAL_ASSERT(it->second.products.empty(), "weight gradients left outside a module (nn::Runner packs them)");
  const auto t0 = Clock::now();
  for (const std::function<void()>& pass : it->second.passes) pass();
  const double seconds = seconds_since(t0);
  profile_.compute_seconds += seconds;
  profile_.weight_seconds += seconds;
  call.weight_gradients.erase(it);
  // The micro-batch's gradients are complete.
  if (call.hooks.after_backward) call.hooks.after_backward(a);
}

double PipelineEngine::evaluate(const nn::StepState& state) {
  begin_call();
  Allocator& alloc = state.activations ? *state.activations : host_allocator();
  const int last = stages_ * chunks_ - 1;
  double loss = 0;
  for (int c = 0; c < chunks_; ++c) {
    const int vs = virtual_stage(c);
    nn::Context ctx(state);
    const Tensor x = vs == 0 ? model_.input(*state.batch) : receive({vs, false}, alloc);
    const Tensor y = run_forward(vs, x, ctx);
    if (vs == last) loss = y.item();
    else send(y, {vs + 1, false});
  }
  finish_sends();
  Tensor total = Tensor::full({1}, float(loss));
  pipeline_.all_reduce(total)->wait();
  return double(total.item());
}

void PipelineEngine::reduce_tied_gradients() {
  if (stages_ == 1) return;
  comm::Communicator& ends = pc_.group(parallel::GroupKind::pipeline_ends);
  for (nn::Parameter* p : params_)  // model order: the same on both ends
    if (tied_.count(p)) ends.all_reduce(p->grad)->wait();
}

double PipelineEngine::squared_gradient_norm() {
  std::vector<nn::Parameter*> counted, experts;  // experts: other ranks of their group hold the others
  for (nn::Parameter* p : params_)
    if (!tied_.count(p) || stage_ == 0) (p->expert_group ? experts : counted).push_back(p);
  comm::Communicator& tensor = pc_.group(parallel::GroupKind::tensor);
  double squares = nn::tp::squared_gradient_norm(counted, tensor);
  if (!experts.empty()) {
    Tensor e = Tensor::full({1}, float(nn::tp::squared_gradient_norm(experts, tensor)));
    experts.front()->expert_group->all_reduce(e)->wait();
    squares += double(e.item());
  }
  Tensor sum = Tensor::full({1}, float(squares));
  pipeline_.all_reduce(sum)->wait();
  return double(sum.item());
}

}  // namespace tidal::pipeline
