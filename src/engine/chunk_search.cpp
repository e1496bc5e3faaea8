#include "engine/chunk_search.h"

#include "core/error.h"
#include "engine/model_data.h"
#include "engine/progress.h"
#include "models/factory.h"
#include "nn/on_host.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace tidal::engine {

std::vector<std::int64_t> parameter_numels(const config::Config& cfg, bool on_host) {
  const auto model = models::make_model(cfg.model, {}, nn::single_device_layers(), cfg.memory.embedding_on_host);
  const std::vector<nn::Parameter*> host = nn::parameters_on_host(*model);
  std::vector<std::int64_t> numels;
  for (const nn::Parameter* p : model->parameters())
    if ((std::find(host.begin(), host.end(), p) != host.end()) == on_host) numels.push_back(p->shape.numel());
  return numels;
}

namespace {

std::size_t device_capacity(const config::Config& cfg) {
  return cfg.memory.device_limit.empty() ? std::numeric_limits<std::size_t>::max()
                                         : config::parse_bytes(cfg.memory.device_limit, "memory.device_limit");
}

}  // namespace

ChunkSearch chunk_search(const config::Config& cfg, const memory::ChunkSizeRange& range) {
  const std::vector<std::int64_t> numels = parameter_numels(cfg);
  ChunkSearch s;
  s.model = fmt::format("{}, {} layers x {}{}", cfg.model.type, cfg.model.n_layer, cfg.model.n_embd,
                        cfg.memory.embedding_on_host ? ", the device's chunks (the embedding layer's on the host)" : "");
  for (std::int64_t n : numels) s.parameters += n, s.largest = std::max(s.largest, n);
  s.group_size = cfg.parallel.data;
  const memory::ChunkOptions options = chunk_options(cfg, false);
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
