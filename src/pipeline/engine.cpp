#include "pipeline/engine.h"

#include "nn/runner.h"
#include "nn/tp/shard.h"
#include "pipeline/partition.h"

#include <array>
#include <map>
#include <memory>

namespace tidal::pipeline {
namespace {

constexpr int kHeader = 8;  // ndim, then up to 7 extents

void collect_used(nn::Module& m, std::set<nn::Parameter*>& out) {
  for (nn::Parameter* p : m.used_parameters()) out.insert(p);
  for (auto& [name, child] : m.children()) collect_used(*child, out);
}

// Transformer blocks cost 1, everything else (embeddings, final LayerNorm, head, loss) 0.
std::vector<double> layer_costs(const models::Model& model) {
  std::vector<double> costs;
  for (const nn::Module* layer : model.layers()) costs.push_back(layer->path().rfind("blocks.", 0) == 0 ? 1.0 : 0.0);
  return costs;
}

}  // namespace

PipelineEngine::PipelineEngine(models::Model& model, parallel::ParallelContext& pc, ScheduleKind kind, int chunks)
    : model_(model),
      pc_(pc),
      pipeline_(pc.group(parallel::GroupKind::pipeline)),
      kind_(kind),
      stages_(pc.layout().spec().pipeline),
      stage_(pc.coordinates().pipeline),
      chunks_(chunks) {
  model_.assign_names("");
  bounds_ = partition(layer_costs(model_), stages_ * chunks_);
  std::set<nn::Parameter*> mine, others;
  for (int vs = 0; vs < stages_ * chunks_; ++vs)
    for (int i = bounds_[vs]; i < bounds_[vs + 1]; ++i)
      collect_used(*model_.layers()[std::size_t(i)], rank_of(vs) == stage_ ? mine : others);
  for (nn::Parameter* p : model_.parameters()) {
    if (!mine.count(p)) continue;
    params_.push_back(p);
    if (others.count(p)) tied_.insert(p);
  }
  TIDAL_ASSERT(tied_.empty() || stage_ == 0 || stage_ == stages_ - 1,
               "pipeline stage {} shares parameters with another stage; only the end stages may", stage_);
}

std::vector<nn::Module*> PipelineEngine::layers() const {
  std::vector<nn::Module*> out;
  for (int c = 0; c < chunks_; ++c) {
    const int vs = c * stages_ + stage_;
    for (int i = bounds_[vs]; i < bounds_[vs + 1]; ++i) out.push_back(model_.layers()[std::size_t(i)]);
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

void PipelineEngine::send(const Tensor& t, int virtual_stage, bool gradient) {
  // An activation goes to virtual_stage + 1, a gradient to virtual_stage - 1.
  const int to = gradient ? virtual_stage - 1 : virtual_stage + 1;
  const int tag = gradient ? 2 * to + 1 : 2 * to;
  TIDAL_ASSERT(t.ndim() < kHeader && t.dtype() == DType::f32, "pipeline transfer of {}", t.str());
  Tensor header = Tensor::zeros({kHeader}, DType::i32);
  header.data<std::int32_t>()[0] = std::int32_t(t.ndim());
  for (int d = 0; d < t.ndim(); ++d) header.data<std::int32_t>()[d + 1] = std::int32_t(t.dim(d));
  sends_.push_back(pipeline_.send(header, rank_of(to), {.tag = tag}));
  sends_.push_back(pipeline_.send(t.is_contiguous() ? t : t.clone(), rank_of(to), {.tag = tag}));
}

Tensor PipelineEngine::receive(int virtual_stage, bool gradient) {
  // An activation comes from virtual_stage - 1, a gradient from virtual_stage + 1.
  const int from = gradient ? virtual_stage + 1 : virtual_stage - 1;
  const int tag = gradient ? 2 * virtual_stage + 1 : 2 * virtual_stage;
  Tensor header = Tensor::empty({kHeader}, DType::i32);
  pipeline_.recv(header, rank_of(from), {.tag = tag})->wait();
  Shape shape;
  for (int d = 0; d < header.data<std::int32_t>()[0]; ++d) shape.push_back(header.data<std::int32_t>()[d + 1]);
  Tensor t = Tensor::empty(shape, DType::f32);
  pipeline_.recv(t, rank_of(from), {.tag = tag})->wait();
  return t;
}

double PipelineEngine::train(const std::vector<MicroBatch>& micro_batches, const nn::StepState& state,
                             const std::function<void(const Action&)>& before_backward) {
  const int last = stages_ * chunks_ - 1;
  std::vector<nn::StepState> states;
  for (const MicroBatch& mb : micro_batches) {
    nn::StepState st = state;
    st.batch = mb.batch;
    st.first_sample = mb.first_sample;
    states.push_back(st);
  }
  std::map<std::pair<int, int>, std::unique_ptr<nn::Context>> live;  // (micro-batch, chunk) -> its forward's context
  double loss = 0;
  for (const Action& a : schedule(kind_, stages_, stage_, int(micro_batches.size()), chunks_)) {
    const int vs = a.chunk * stages_ + stage_;
    const MicroBatch& mb = micro_batches[std::size_t(a.micro_batch)];
    if (a.kind == Action::forward) {
      auto ctx = std::make_unique<nn::Context>(states[std::size_t(a.micro_batch)]);
      const Tensor x = vs == 0 ? model_.input(*mb.batch) : receive(vs, false);
      const Tensor y = run_forward(vs, x, *ctx);
      if (vs == last) loss += double(y.item()) * mb.loss_scale;
      else send(y, vs, false);
      live[{a.micro_batch, a.chunk}] = std::move(ctx);
    } else {
      auto it = live.find({a.micro_batch, a.chunk});
      TIDAL_ASSERT(it != live.end(), "backward of micro-batch {} before its forward", a.micro_batch);
      if (before_backward) before_backward(a);
      const Tensor dy = vs == last ? Tensor::full({1}, mb.loss_scale) : receive(vs, true);
      const Tensor dx = run_backward(vs, dy, *it->second);
      if (vs > 0) send(dx, vs, true);
      live.erase(it);
    }
  }
  for (const comm::WorkPtr& w : sends_) w->wait();
  sends_.clear();
  Tensor total = Tensor::full({1}, float(loss));
  pipeline_.all_reduce(total)->wait();  // only the last stage holds it
  return double(total.item());
}

double PipelineEngine::evaluate(const nn::StepState& state) {
  const int last = stages_ * chunks_ - 1;
  double loss = 0;
  for (int c = 0; c < chunks_; ++c) {
    const int vs = c * stages_ + stage_;
    nn::Context ctx(state);
    const Tensor x = vs == 0 ? model_.input(*state.batch) : receive(vs, false);
    const Tensor y = run_forward(vs, x, ctx);
    if (vs == last) loss = y.item();
    else send(y, vs, false);
  }
  for (const comm::WorkPtr& w : sends_) w->wait();
  sends_.clear();
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
  std::vector<nn::Parameter*> counted;
  for (nn::Parameter* p : params_)
    if (!tied_.count(p) || stage_ == 0) counted.push_back(p);
  Tensor sum = Tensor::full({1}, float(nn::tp::squared_gradient_norm(counted, pc_.group(parallel::GroupKind::tensor))));
  pipeline_.all_reduce(sum)->wait();
  return double(sum.item());
}

}  // namespace tidal::pipeline
