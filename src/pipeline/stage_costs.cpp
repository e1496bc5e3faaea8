#include "pipeline/stage_costs.h"

#include "nn/context.h"
#include "nn/runner.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <set>

namespace tidal::pipeline {
namespace {

double parameter_elements(nn::Module& layer) {
  std::set<nn::Parameter*> used;
  layer.collect_used_parameters(used);
  double n = 0;
  for (const nn::Parameter* p : used) n += double((p->full_shape.size() ? p->full_shape : p->shape).numel());
  return n;
}

// Forward + backward seconds of each layer on the probe's batch, skipping the block layers after
// the first (they repeat its shape and work). Best of 3 runs after a warm-up; max over ranks.
std::vector<double> measure_layer_times(models::Model& model, const TimeProbe& probe) {
  TIDAL_ASSERT(probe.state.batch && probe.world, "timing layers needs a batch and the world group");
  model.assign_names("");  // names key the parameters' initial values
  const auto& layers = model.layers();
  std::vector<int> chain;
  for (int i = 0; i < int(layers.size()); ++i)
    if (i <= model.first_block_layer() || i >= model.end_block_layer()) chain.push_back(i);
  std::set<nn::Parameter*> used, borrowed;
  for (int i : chain) layers[std::size_t(i)]->collect_used_parameters(used);
  HostAllocator scratch;
  for (nn::Parameter* p : used)
    if (!p->data.defined()) {
      nn::materialize(*p, probe.state.seed, scratch);
      borrowed.insert(p);
    }
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  nn::Runner runner;  // no hooks: a gradient reducer must not see these passes
  nn::StepState state = probe.state;
  state.runner = &runner;
  Tensor times = Tensor::full({std::int64_t(layers.size())}, std::numeric_limits<float>::max());
  std::vector<double> pass(layers.size(), 0.0);
  for (int run = 0; run < 4; ++run) {
    nn::Context ctx(state);
    Tensor x = model.input(*state.batch);
    for (int i : chain) {
      const auto t0 = Clock::now();
      x = ctx.forward(*layers[std::size_t(i)], x, std::size_t(i));
      pass[std::size_t(i)] = seconds(t0);
    }
    Tensor dy = Tensor::full({1}, 1.0f);
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const auto t0 = Clock::now();
      dy = ctx.backward(*layers[std::size_t(*it)], dy, std::size_t(*it));
      pass[std::size_t(*it)] += seconds(t0);
    }
    if (run == 0) continue;  // warm-up
    for (int i : chain) times.data<float>()[i] = std::min(times.data<float>()[i], float(pass[std::size_t(i)]));
  }
  for (nn::Parameter* p : borrowed) p->data = p->grad = Tensor();
  for (nn::Parameter* p : used)
    if (!borrowed.count(p)) p->grad.zero_();  // held already: the probe's gradients are not the step's
  probe.world->all_reduce(times, {.op = comm::ReduceOp::max})->wait();
  return {times.data<float>(), times.data<float>() + layers.size()};
}

}  // namespace

std::vector<int> unit_bounds(const models::Model& model) {
  std::vector<int> bounds{0};
  for (int i = model.first_block_layer() + 1; i < model.end_block_layer(); ++i) bounds.push_back(i);
  bounds.push_back(int(model.layers().size()));
  return bounds;
}

std::vector<double> unit_costs(models::Model& model, PartitionBy by, const TimeProbe* probe) {
  const std::vector<int> units = unit_bounds(model);
  const std::vector<int>& blocks = model.blocks_in_layer();
  TIDAL_ASSERT(units.size() == blocks.size() + 1, "one unit per block layer");
  std::vector<double> costs(blocks.size(), 0.0);
  if (by == PartitionBy::layers) {
    for (std::size_t k = 0; k < blocks.size(); ++k) costs[k] = blocks[k];
    return costs;
  }
  std::vector<double> layer_cost(model.layers().size(), 0.0);
  if (by == PartitionBy::parameters) {
    for (std::size_t i = 0; i < layer_cost.size(); ++i) layer_cost[i] = parameter_elements(*model.layers()[i]);
  } else {
    TIDAL_ASSERT(probe, "parallel.partition = \"time\" needs a probe batch");
    layer_cost = measure_layer_times(model, *probe);
    // Block layers after the first were not run: each costs its blocks at the first's rate.
    const int first = model.first_block_layer();
    const double per_block = layer_cost[std::size_t(first)] / blocks[0];
    for (int i = first + 1; i < model.end_block_layer(); ++i) layer_cost[std::size_t(i)] = per_block * blocks[std::size_t(i - first)];
  }
  for (std::size_t k = 0; k < costs.size(); ++k)
    for (int i = units[k]; i < units[k + 1]; ++i) costs[k] += layer_cost[std::size_t(i)];
  return costs;
}

}  // namespace tidal::pipeline
