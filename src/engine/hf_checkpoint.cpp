#include "engine/hf_checkpoint.h"

#include "config/config.h"
#include "core/process.h"
#include "engine/checkpoint/reader.h"
#include "engine/finetune.h"
#include "models/lora.h"
#include "io/atomic_file.h"
#include "io/hf_weights.h"
#include "models/registry.h"
#include "nn/tp/shard.h"
#include "ops/cast.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

namespace tidal::engine {
namespace fs = std::filesystem;
namespace {

// The directory's tensors by canonical name (io/hf_layout.h), checked against the architecture:
// every tensor there, none besides those transformers itself skips, each of its shape.
std::map<std::string, std::string> check_directory(const std::string& dir, const models::HfAdapter& hf,
                                                   const models::ModelConfig& model, const io::HfWeightFiles& files,
                                                   const std::vector<io::HfTensorSource>& sources) {
  std::map<std::string, Shape> expected;
  for (const io::HfTensorSource& s : sources)
    for (std::size_t i = 0; i < s.hf_names.size(); ++i) expected.emplace(s.hf_names[i], s.hf_shapes[i]);
  std::set<std::string> known;
  for (const auto& [name, shape] : expected) known.insert(name);
  const std::string& arch = hf.architecture;
  std::map<std::string, std::string> raw_of;  // canonical -> the file's name
  for (const auto& [raw, at] : files.tensors()) {
    const std::string name = io::hf_canonical_name(hf.base_prefix, raw, known);
    if (!known.count(name)) {
      TIDAL_CHECK(hf.ignored_on_load(name),
                  "'{}': tensor '{}' is not part of the {} that {}/config.json describes ({} layers): was the file "
                  "saved from another model or config?",
                  files.file_of(raw), raw, arch, dir, model.n_layer);
      continue;
    }
    const io::TensorEntry& e = at.second;
    TIDAL_CHECK(e.shape == expected.at(name), "'{}': tensor '{}' is {} but {}/config.json makes it {}",
                files.file_of(raw), raw, e.shape.str(), dir, expected.at(name).str());
    TIDAL_CHECK(e.dtype != DType::i32 && e.dtype != DType::u8, "'{}': tensor '{}' is {}; weights are F32, BF16 or F16",
                files.file_of(raw), raw, dtype_name(e.dtype));
    TIDAL_CHECK(raw_of.emplace(name, raw).second, "{}: tensors '{}' and '{}' are the same weight twice", dir,
                raw_of[name], raw);
  }
  for (const std::string& name : known)
    TIDAL_CHECK(raw_of.count(name), "{}: the weights have no tensor '{}', which a {} of this config.json has{}", dir,
                name, arch, models::model_traits(model).tied_head ? "" : " (tie_word_embeddings is false: the head has a table of its own)");
  return raw_of;
}

// Grouped-query attention's query rows as tidal holds them: rows[0] (HF's query projection, its
// heads in HF's order) as one piece per head in tidal's order (io::tidal_query_head), then the rest.
std::vector<Tensor> query_heads_in_tidal_order(const std::vector<Tensor>& rows, const io::HfTensorSource& src) {
  const Tensor& q = rows[0];
  const std::int64_t hd = q.dim(0) / src.query_heads;
  std::vector<Tensor> out(std::size_t(src.query_heads));
  for (int h = 0; h < src.query_heads; ++h)
    out[std::size_t(io::tidal_query_head(h, src.query_heads, src.kv_heads))] = q.slice(0, h * hd, (h + 1) * hd);
  out.insert(out.end(), rows.begin() + 1, rows.end());
  return out;
}

}  // namespace

void copy_from_hf(nn::Parameter& p, const io::HfTensorSource& src, const std::vector<Tensor>& views) {
  const Shape& full = p.full_shape.size() ? p.full_shape : p.shape;
  // Each HF tensor as rows of tidal's whole tensor: transposed (a strided view of the mapped
  // file) or reshaped ([1, 1, D] -> [D], [D, C, P, P] -> [D, C*P*P]).
  std::vector<Tensor> rows;
  for (const Tensor& v : views) {
    if (src.transposed) {
      rows.push_back(v.transpose(0, 1));
    } else {
      Shape s = full;
      s[0] = v.numel() / (full.numel() / full[0]);
      rows.push_back(v.reshape(s));
    }
  }
  if (src.query_heads) rows = query_heads_in_tidal_order(rows, src);
  // Straight into the parameter when the file holds its dtype; else through a block to convert.
  if (rows[0].dtype() == p.data.dtype()) {
    nn::tp::copy_shard(p, rows, p.data);
  } else {
    Tensor block = Tensor::empty(p.shape, rows[0].dtype());
    nn::tp::copy_shard(p, rows, block);
    ops::cast(p.data, block);
  }
}

HfLoadReport load_hf_weights(const std::string& dir, const models::ModelConfig& model,
                             std::span<nn::Parameter* const> params) {
  const auto start = std::chrono::steady_clock::now();
  HfLoadReport report;
  report.rss_before_bytes = resident_bytes();
  const io::HfWeightFiles files(dir);
  const models::HfAdapter& hf = models::hf_adapter(model);
  const std::vector<io::HfTensorSource> sources = hf.tensors(model);
  const std::map<std::string, std::string> raw_of = check_directory(dir, hf, model, files, sources);
  std::map<std::string, const io::HfTensorSource*> by_name;
  for (const io::HfTensorSource& s : sources) by_name[s.tidal_name] = &s;

  report.file_bytes = files.total_bytes();
  for (nn::Parameter* p : params) {
    const auto found = by_name.find(p->name);
    TIDAL_ASSERT(found != by_name.end(), "parameter {} has no place in the Hugging Face layout", p->name);
    const io::HfTensorSource& src = *found->second;
    std::vector<Tensor> views;
    for (const std::string& hf : src.hf_names) views.push_back(files.view(raw_of.at(hf)));
    copy_from_hf(*p, src, views);
    for (const std::string& hf : src.hf_names) files.release(raw_of.at(hf));
    ++report.tensors;
    report.copied_bytes += std::uint64_t(p->shape.numel()) * dtype_size(views[0].dtype());
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.peak_rss_bytes = peak_resident_bytes();
  return report;
}

namespace {

// One tensor of an export: its Hugging Face name and shape, and where it comes from - rows
// [row, row + rows) of tidal's tensor `src` (transposed where HF stores [in, out]).
struct HfPiece {
  const io::HfTensorSource* src = nullptr;
  std::size_t index = 0;  // in src->hf_names
  std::int64_t row = 0, rows = 0;
  std::uint64_t bytes() const { return std::uint64_t(src->hf_shapes[index].numel()) * sizeof(float); }
};

// `view` (host memory, any strides) into `file` in its row-major order: whole when contiguous,
// else in slabs of rows through `buffer` (made from `memory` when first needed: at most
// kExportBufferBytes, and at least a row).
void append_rows(io::SafetensorsWriter& file, const Tensor& view, Tensor& buffer, Allocator& memory) {
  if (view.is_contiguous()) return file.append(view.raw(), view.nbytes());
  const std::int64_t width = view.numel() / view.dim(0);
  if (!buffer.defined())
    buffer = Tensor::empty({std::max<std::int64_t>(width, std::int64_t(kExportBufferBytes / sizeof(float)))},
                           DType::f32, memory);
  const std::int64_t per = std::max<std::int64_t>(1, buffer.numel() / width);
  for (std::int64_t r = 0; r < view.dim(0); r += per) {
    const std::int64_t k = std::min(per, view.dim(0) - r);
    Shape shape = view.shape();
    shape[0] = k;
    Tensor slab = buffer.slice(0, 0, k * width).reshape(shape);
    slab.copy_from(view.slice(0, r, r + k));
    file.append(slab.raw(), slab.nbytes());
  }
}

// Writes one HF tensor from tidal's whole tensor `whole` (rows as tidal holds them).
void write_piece(io::SafetensorsWriter& file, const HfPiece& piece, const Tensor& whole, Tensor& buffer,
                 Allocator& memory) {
  const io::HfTensorSource& src = *piece.src;
  const Tensor rows = (src.transposed ? whole.transpose(0, 1) : whole).slice(0, piece.row, piece.row + piece.rows);
  if (piece.index != 0 || !src.query_heads) return append_rows(file, rows, buffer, memory);
  // Grouped-query attention: the query heads in HF's order (io::tidal_query_head).
  const std::int64_t hd = rows.dim(0) / src.query_heads;
  for (int h = 0; h < src.query_heads; ++h) {
    const std::int64_t t = io::tidal_query_head(h, src.query_heads, src.kv_heads);
    append_rows(file, rows.slice(0, t * hd, (t + 1) * hd), buffer, memory);
  }
}

}  // namespace

HfExportReport write_hf_tensors(const std::vector<io::HfTensorSource>& sources, const WholeTensor& whole,
                                const std::string& out_dir, const HfFiles& files, comm::Communicator* world) {
  HfExportReport report;
  // Every HF tensor in order, then the shards: each closed before it would pass max_shard_bytes
  // (a larger tensor alone), as save_pretrained cuts them.
  std::vector<std::vector<HfPiece>> shards(1);
  std::uint64_t in_shard = 0;
  for (const io::HfTensorSource& src : sources) {
    const Shape shape_of = whole.shape(src.tidal_name);
    report.largest_tensor_bytes = std::max(report.largest_tensor_bytes, std::uint64_t(shape_of.numel()) * sizeof(float));
    std::int64_t row = 0;  // tidal's rows are the HF tensors stacked
    for (std::size_t i = 0; i < src.hf_names.size(); ++i) {
      const Shape& shape = src.hf_shapes[i];
      const std::int64_t n = src.transposed ? shape[0] : shape.numel() / (shape_of.numel() / shape_of[0]);
      const HfPiece piece{.src = &src, .index = i, .row = row, .rows = n};
      if (in_shard > 0 && in_shard + piece.bytes() > files.max_shard_bytes) {
        shards.emplace_back();
        in_shard = 0;
      }
      shards.back().push_back(piece);
      in_shard += piece.bytes();
      report.bytes += piece.bytes();
      ++report.tensors;
      row += n;
    }
  }
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  TIDAL_CHECK(!ec, "cannot create '{}': {}", out_dir, ec.message());
  const auto file_name = [&](std::size_t k) {
    return shards.size() == 1 ? files.stem + ".safetensors"
                              : fmt::format("{}-{:05d}-of-{:05d}.safetensors", files.stem, k + 1, shards.size());
  };
  // Each rank its shards (k % ranks), tidal's tensors read whole one at a time.
  HostAllocator memory;
  Tensor buffer;  // for transposed tensors (write_piece)
  const int rank = world ? world->rank() : 0, ranks = world ? world->size() : 1;
  std::string held_name;
  Tensor held;
  for (std::size_t k = std::size_t(rank); k < shards.size(); k += std::size_t(ranks)) {
    std::vector<io::SafetensorsWriter::Entry> entries;
    for (const HfPiece& p : shards[k]) entries.push_back({p.src->hf_names[p.index], DType::f32, p.src->hf_shapes[p.index]});
    io::SafetensorsWriter file((fs::path(out_dir) / file_name(k)).string(), entries, {{"format", "pt"}});
    for (const HfPiece& p : shards[k]) {
      if (held_name != p.src->tidal_name) {
        held = Tensor();  // the last one's memory back first
        held = whole.read(p.src->tidal_name, memory);
        held_name = p.src->tidal_name;
      }
      write_piece(file, p, held, buffer, memory);
    }
    file.commit();
  }
  held = Tensor();
  buffer = Tensor();
  if (world) world->barrier({.timeout = comm::Seconds(3600)})->wait();
  report.files = int(shards.size());
  report.peak_bytes = memory.peak_bytes();
  report.peak_rss_bytes = peak_resident_bytes();
  if (rank != 0) return report;
  if (shards.size() > 1) {
    nlohmann::json map = nlohmann::json::object();
    for (std::size_t k = 0; k < shards.size(); ++k)
      for (const HfPiece& p : shards[k]) map[p.src->hf_names[p.index]] = file_name(k);
    const std::string index =
        nlohmann::json{{"metadata", {{"total_size", report.bytes}}}, {"weight_map", map}}.dump(2) + "\n";
    io::AtomicFile out((fs::path(out_dir) / (files.stem + ".safetensors.index.json")).string());
    out.write(index.data(), index.size());
    out.commit();
  }
  return report;
}

void write_text_file(const std::string& path, const std::string& text) {
  io::AtomicFile file(path);
  file.write(text.data(), text.size());
  file.commit();
}

HfExportReport export_hf(const std::string& checkpoint, const std::string& out_dir, std::uint64_t max_shard_bytes,
                         comm::Communicator* world, bool merge) {
  CheckpointReader reader(checkpoint);
  const config::Config cfg = reader.stored_config();
  const models::HfAdapter& hf = models::hf_adapter(cfg.model);
  const std::vector<io::HfTensorSource> sources = hf.tensors(cfg.model);
  const bool adapted = cfg.finetune.method == config::FinetuneMethod::lora;
  TIDAL_CHECK(adapted || !merge, "--merge folds LoRA adapters into their base, and '{}' was trained in full "
              "(finetune.method = \"full\"): leave --merge out", reader.step_dir());
  TIDAL_CHECK(!adapted || merge, "'{}' holds LoRA adapters (finetune.method = \"lora\"), not a whole model: export "
              "them with --format peft, or the base with the adapters folded in with --merge", reader.step_dir());
  std::unique_ptr<models::Model> merged;
  if (adapted) {  // the whole model in memory, its adapters folded in
    merged = load_adapted_model(reader);
    models::merge_lora(*merged);
  }
  const WholeTensor whole{
      .shape = [&](const std::string& name) {
        if (merged) return merged->parameter(name).shape;
        TIDAL_CHECK(reader.has(name), "'{}' has no tensor '{}' that its config's {} model has", reader.step_dir(), name,
                    cfg.model.type);
        return reader.metadata().tensors.at(name).shape;
      },
      .read = [&](const std::string& name, Allocator& memory) {
        return merged ? merged->parameter(name).data.clone(memory) : reader.read_whole(name, memory);
      }};
  HfExportReport report = write_hf_tensors(sources, whole, out_dir, {.max_shard_bytes = max_shard_bytes}, world);
  report.architecture = hf.architecture;
  if (!world || world->rank() == 0)
    write_text_file((fs::path(out_dir) / "config.json").string(),
                    io::hf_config_text(hf.write(cfg.model), hf.architecture));
  return report;
}

}  // namespace tidal::engine
