#include "engine/planning/chunk_search.h"

#include "config/options.h"
#include "core/bytes.h"
#include "core/error.h"
#include "distributed/rank_chunks.h"
#include "engine/finetune.h"
#include "engine/model_data.h"
#include "nn/on_host.h"
#include "nn/parallel_layers.h"
#include "pipeline/engine.h"
#include "pipeline/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace tidal::engine {

std::vector<std::int64_t> parameter_numels(const config::Config& cfg, bool on_host) {
  const auto model = build_model(cfg, nn::single_device_layers());
  const std::vector<nn::Parameter*> host = nn::parameters_on_host(*model);
  std::vector<std::int64_t> numels;
  for (const nn::Parameter* p : model->parameters())  // a frozen base (LoRA) is in no list
    if (!p->frozen && (std::find(host.begin(), host.end(), p) != host.end()) == on_host)
      numels.push_back(p->shape.numel());
  return numels;
}

std::int64_t model_parameters(const config::Config& cfg) {
  return build_model(cfg, nn::single_device_layers())->num_parameters();
}

namespace {

std::size_t device_capacity(const config::Config& cfg) {
  return cfg.memory.device_limit.empty() ? std::numeric_limits<std::size_t>::max()
                                         : config::parse_bytes(cfg.memory.device_limit, "memory.device_limit");
}

}  // namespace

namespace {

// Under mpirun: every rank's own lists under the layout (its tensor blocks, its stage's, in
// segments), laid out at each size; fragmentation summed over the ranks, chunks and bytes of the
// rank that has the most.
ChunkSearch search_layout(const config::Config& cfg, const memory::ChunkSizeRange& range, comm::MpiRuntime& mpi) {
  parallel::ParallelContext pc(config::context_options(cfg), &mpi);
  const auto layers = nn::make_layers(pc, {.keep_gathered = cfg.parallel.tensor.keep_gathered});
  const auto model = build_model(cfg, *layers);
  pipeline::PipelineOptions po;
  po.schedule = cfg.parallel.schedule;
  po.chunks = cfg.parallel.virtual_stages;
  pipeline::PipelineEngine engine(*model, pc, po);
  const std::vector<nn::Parameter*> host = nn::parameters_on_host(*model);
  std::vector<nn::Parameter*> params;
  for (nn::Parameter* p : engine.parameters())
    if (std::find(host.begin(), host.end(), p) == host.end()) params.push_back(p);
  const memory::ChunkParameters lists = distributed::chunk_parameters(params, engine, pc);
  comm::Communicator& world = pc.group(parallel::GroupKind::world);
  memory::ChunkOptions options = config::chunk_options(cfg, false);
  options.group = &distributed::chunk_group(pc);

  ChunkSearch s;
  const config::ParallelConfig& p = cfg.parallel;
  s.model = fmt::format("{}, {} layers x {}, data {} x pipeline {} x tensor {} ({}) x sequence {}: every rank's lists",
                        cfg.model.type, cfg.model.n_layer, cfg.model.n_embd, p.data, p.pipeline, p.tensor.size,
                        p.tensor.mode, p.sequence);
  s.parameters = model->num_parameters();
  s.largest = distributed::world_largest_parameter(lists, pc);
  s.group_size = options.group->size();
  s.bytes_per_element =
      memory::chunk_list_bytes(memory::layout_chunks({1}, 1, 1), config::chunk_options(cfg, false)).total();
  const std::size_t device = device_capacity(cfg);
  s.training_size = distributed::agreed_chunk_size(lists, options, device, pc);
  const memory::ChunkSizeRange training = memory::chunk_size_range_for({s.largest}, options, device);
  s.range = {.from = range.from ? range.from : training.from,
             .to = range.to ? range.to : std::max(training.to, range.from),
             .step = range.step ? range.step : training.step};
  s.default_range = !range.from && !range.to && !range.step;
  std::vector<std::int64_t> sizes;
  for (std::int64_t size = s.range.from; size <= s.range.to; size += s.range.step)
    if (size >= s.largest) sizes.push_back(size);
  TIDAL_CHECK(!sizes.empty(),
              "no chunk size from {} to {} elements holds the largest parameter ({} elements, of {}): search from at "
              "least --from {}",
              s.range.from, s.range.to, s.largest, s.model, s.largest);
  const std::vector<double> waste = distributed::world_padding(lists, s.group_size, sizes, pc);
  // Per size, the most chunks and chunk-list bytes of any rank (in MiB: float sums stay exact).
  std::vector<std::int64_t> numels;
  for (const nn::Parameter* q : lists.params) numels.push_back(q->shape.numel());
  Tensor most = Tensor::zeros({2 * std::int64_t(sizes.size())}, DType::f32, host_allocator());
  Tensor used = Tensor::zeros({1}, DType::f32, host_allocator());
  for (std::int64_t n : numels) used.data<float>()[0] += float(n);
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    const memory::ChunkLayout layout = memory::layout_chunks(numels, sizes[k], s.group_size, lists.segment);
    most.data<float>()[2 * k] = float(layout.chunks);
    most.data<float>()[2 * k + 1] = float(double(memory::chunk_list_bytes(layout, options).total()) / (1 << 20));
  }
  world.all_reduce(most, {.op = comm::ReduceOp::max})->wait();
  world.all_reduce(used)->wait();
  for (std::size_t k = 0; k < sizes.size(); ++k)
    s.rows.push_back({.size = sizes[k],
                      .chunks = int(most.data<float>()[2 * k]),
                      .fragmentation = waste[k] / (waste[k] + double(used.data<float>()[0])),
                      .chunk_bytes = std::int64_t(double(most.data<float>()[2 * k + 1]) * (1 << 20))});
  s.best = sizes[std::size_t(std::min_element(waste.begin(), waste.end()) - waste.begin())];
  return s;
}

}  // namespace

ChunkSearch chunk_search(const config::Config& cfg, const memory::ChunkSizeRange& range, comm::MpiRuntime* mpi) {
  if (parallel::launched_world_size(mpi) > 1) return search_layout(cfg, range, *mpi);
  const std::vector<std::int64_t> numels = parameter_numels(cfg);
  ChunkSearch s;
  s.model = fmt::format("{}, {} layers x {}{}", cfg.model.type, cfg.model.n_layer, cfg.model.n_embd,
                        cfg.memory.embedding_on_host ? ", the device's chunks (the embedding layer's on the host)" : "");
  for (std::int64_t n : numels) s.parameters += n, s.largest = std::max(s.largest, n);
  s.group_size = cfg.parallel.data;
  const memory::ChunkOptions options = config::chunk_options(cfg, false);
  const std::size_t device = device_capacity(cfg);
  const memory::ChunkLayout one = memory::layout_chunks({1}, 1, 1);
  s.bytes_per_element = memory::chunk_list_bytes(one, options).total();
  s.training_size = memory::chunk_size_for(numels, s.group_size, options, device);
  const memory::ChunkSizeRange training = memory::chunk_size_range_for(numels, options, device);
  s.range = {.from = range.from ? range.from : training.from,
             .to = range.to ? range.to : std::max(training.to, range.from),
             .step = range.step ? range.step : training.step};
  s.default_range = !range.from && !range.to && !range.step;
  s.best = memory::search_chunk_size(numels, s.group_size, s.range);
  TIDAL_CHECK(s.best > 0,
              "no chunk size from {} to {} elements holds the largest parameter ({} elements, of {}): search from at "
              "least --from {}",
              s.range.from, s.range.to, s.largest, s.model, s.largest);
  for (std::int64_t size = s.range.from; size <= s.range.to; size += s.range.step) {
    if (size < s.largest) continue;
    const memory::ChunkLayout layout = memory::layout_chunks(numels, size, s.group_size);
    s.rows.push_back({.size = size,
                      .chunks = layout.chunks,
                      .fragmentation = layout.fragmentation(),
                      .chunk_bytes = memory::chunk_list_bytes(layout, options).total()});
  }
  return s;
}

nlohmann::json ChunkSearch::json() const {
  nlohmann::json sizes = nlohmann::json::array();
  for (const ChunkSizeRow& r : rows)
    sizes.push_back({{"size", r.size},
                     {"chunks", r.chunks},
                     {"fragmentation", r.fragmentation},
                     {"utilisation", r.utilisation()},
                     {"chunk_bytes", r.chunk_bytes}});
  nlohmann::json out = {{"model", model},
                        {"parameters", parameters},
                        {"largest_parameter", largest},
                        {"group_size", group_size},
                        {"bytes_per_element", bytes_per_element},
                        {"range", {{"from", range.from}, {"to", range.to}, {"step", range.step}}},
                        {"sizes", sizes},
                        {"best", best},
                        {"training_size", training_size}};
  const auto it = std::find_if(rows.begin(), rows.end(), [&](const ChunkSizeRow& r) { return r.size == best; });
  if (it != rows.end()) out["best_fragmentation"] = it->fragmentation;
  return out;
}

std::string format_chunk_search(const ChunkSearch& s) {
  std::string out = fmt::format(
      "chunk-search: {} ({} parameters, the largest {} elements), {} bytes per element over the chunk lists{}\n",
      s.model, s.parameters, s.largest, s.bytes_per_element,
      s.group_size > 1 ? fmt::format(", chunk groups of {} ranks", s.group_size) : "");
  out += fmt::format("sizes {} to {} elements in steps of {}{}\n\n", s.range.from, s.range.to, s.range.step,
                     s.default_range ? " (training's search range: the largest parameter up to 4x it)" : "");
  out += fmt::format("{:>14} {:>7} {:>14} {:>12} {:>14}\n", "size", "chunks", "fragmentation", "utilisation",
                     "chunk memory");
  for (const ChunkSizeRow& r : s.rows)
    out += fmt::format("{:>14} {:>7} {:>13.2f}% {:>11.2f}% {:>14}{}\n", r.size, r.chunks, 100 * r.fragmentation,
                       100 * r.utilisation(), human_bytes(std::uint64_t(r.chunk_bytes)), r.size == s.best ? "  <- best" : "");
  const auto best = std::find_if(s.rows.begin(), s.rows.end(), [&](const ChunkSizeRow& r) { return r.size == s.best; });
  out += fmt::format("\nbest: {} elements, {:.2f}% fragmentation ({:.2f}% utilisation), {} chunks, {} of chunk memory; "
                     "use it with --set memory.chunk_size={}",
                     s.best, 100 * best->fragmentation, 100 * best->utilisation(), best->chunks,
                     human_bytes(std::uint64_t(best->chunk_bytes)), s.best);
  out += s.training_size == s.best ? " (training picks it too)\n"
                                   : fmt::format(" (training would use {})\n", s.training_size);
  return out;
}

}  // namespace tidal::engine
