#include "engine/hf_checkpoint.h"

#include "config/config.h"
#include "config/hf_model.h"
#include "core/process.h"
#include "engine/checkpoint.h"
#include "io/atomic_file.h"
#include "io/hf_layout.h"
#include "io/hf_weights.h"
#include "nn/tp/shard.h"
#include "ops/cast.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

namespace tidal::engine {
namespace fs = std::filesystem;
namespace {

// The directory's tensors by canonical name (io/hf_layout.h), checked against the architecture:
// every tensor there, none besides those transformers itself skips, each of its shape.
std::map<std::string, std::string> check_directory(const std::string& dir, const io::HfModelSpec& spec,
                                                   const io::HfWeightFiles& files,
                                                   const std::vector<io::HfTensorSource>& sources) {
  std::map<std::string, Shape> expected;
  for (const io::HfTensorSource& s : sources)
    for (std::size_t i = 0; i < s.hf_names.size(); ++i) expected.emplace(s.hf_names[i], s.hf_shapes[i]);
  std::set<std::string> known;
  for (const auto& [name, shape] : expected) known.insert(name);
  const char* arch = io::hf_architecture(spec.family);
  std::map<std::string, std::string> raw_of;  // canonical -> the file's name
  for (const auto& [raw, at] : files.tensors()) {
    const std::string name = io::hf_canonical_name(spec.family, raw, known);
    if (!known.count(name)) {
      TIDAL_CHECK(io::hf_ignored_on_load(spec.family, name),
                  "'{}': tensor '{}' is not part of the {} that {}/config.json describes ({} layers): was the file "
                  "saved from another model or config?",
                  files.file_of(raw), raw, arch, dir, spec.n_layer);
      continue;
    }
    const io::TensorEntry& e = at.second;
    TIDAL_CHECK(e.shape == expected.at(name), "'{}': tensor '{}' is {} but {}/config.json makes it {}",
                files.file_of(raw), raw, e.shape.str(), dir, expected.at(name).str());
    TIDAL_CHECK(e.dtype != DType::i32, "'{}': tensor '{}' is int32; weights are F32, BF16 or F16", files.file_of(raw),
                raw);
    TIDAL_CHECK(raw_of.emplace(name, raw).second, "{}: tensors '{}' and '{}' are the same weight twice", dir,
                raw_of[name], raw);
  }
  for (const std::string& name : known)
    TIDAL_CHECK(raw_of.count(name), "{}: the weights have no tensor '{}', which a {} of this config.json has{}", dir,
                name, arch, spec.tie_embeddings ? "" : " (tie_word_embeddings is false: the head has a table of its own)");
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

// The inverse for export: tidal's query rows `q` [H hd, ...] with HF's head order.
Tensor query_heads_in_hf_order(const Tensor& q, const io::HfTensorSource& src) {
  const std::int64_t hd = q.dim(0) / src.query_heads;
  Tensor out = Tensor::empty(q.shape(), q.dtype(), host_allocator());
  for (int h = 0; h < src.query_heads; ++h) {
    const std::int64_t t = io::tidal_query_head(h, src.query_heads, src.kv_heads);
    out.slice(0, h * hd, (h + 1) * hd).copy_from(q.slice(0, t * hd, (t + 1) * hd));
  }
  return out;
}

}  // namespace

HfLoadReport load_hf_weights(const std::string& dir, const io::HfModelSpec& spec,
                             std::span<nn::Parameter* const> params) {
  const auto start = std::chrono::steady_clock::now();
  HfLoadReport report;
  report.rss_before_bytes = resident_bytes();
  const io::HfWeightFiles files(dir);
  const std::vector<io::HfTensorSource> sources = io::hf_tensor_sources(spec);
  const std::map<std::string, std::string> raw_of = check_directory(dir, spec, files, sources);
  std::map<std::string, const io::HfTensorSource*> by_name;
  for (const io::HfTensorSource& s : sources) by_name[s.tidal_name] = &s;

  report.file_bytes = files.total_bytes();
  for (nn::Parameter* p : params) {
    const auto found = by_name.find(p->name);
    TIDAL_ASSERT(found != by_name.end(), "parameter {} has no place in the Hugging Face layout", p->name);
    const io::HfTensorSource& src = *found->second;
    const Shape& full = p->full_shape.size() ? p->full_shape : p->shape;
    // Each HF tensor as rows of tidal's whole tensor: transposed (a strided view of the mapped
    // file) or reshaped ([1, 1, D] -> [D], [D, C, P, P] -> [D, C*P*P]).
    std::vector<Tensor> rows;
    for (const std::string& hf : src.hf_names) {
      const Tensor v = files.view(raw_of.at(hf));
      if (src.transposed) {
        rows.push_back(v.transpose(0, 1));
      } else {
        Shape s = full;
        s[0] = v.numel() / (full.numel() / full[0]);
        rows.push_back(v.reshape(s));
      }
    }
    if (src.query_heads) rows = query_heads_in_tidal_order(rows, src);
    // Straight into the parameter when the file holds fp32; else through a block to convert.
    if (rows[0].dtype() == p->data.dtype()) {
      nn::tp::copy_shard(*p, rows, p->data);
    } else {
      Tensor block = Tensor::empty(p->shape, rows[0].dtype());
      nn::tp::copy_shard(*p, rows, block);
      ops::cast(p->data, block);
    }
    for (const std::string& hf : src.hf_names) files.release(raw_of.at(hf));
    ++report.tensors;
    report.copied_bytes += std::uint64_t(p->shape.numel()) * dtype_size(rows[0].dtype());
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.peak_rss_bytes = peak_resident_bytes();
  return report;
}

HfExportReport export_hf(const std::string& checkpoint, const std::string& out_dir, std::uint64_t max_shard_bytes) {
  const StoredCheckpoint stored = open_checkpoint(checkpoint);
  const std::string& step_dir = stored.step_dir;
  const io::SafetensorsReader& weights = *stored.weights;
  const config::Config& cfg = stored.config;
  const io::HfModelSpec spec = config::hf_spec(cfg.model);

  std::vector<std::pair<std::string, Tensor>> out;
  HfExportReport report;
  report.architecture = io::hf_architecture(spec.family);
  for (const io::HfTensorSource& src : io::hf_tensor_sources(spec)) {
    TIDAL_CHECK(weights.entries().count(src.tidal_name), "'{}' has no tensor '{}' that its config's {} model has",
                step_dir, src.tidal_name, cfg.model.type);
    Tensor whole = weights.view(src.tidal_name);
    if (src.transposed) whole = whole.transpose(0, 1);
    std::int64_t row = 0;  // tidal's rows are the HF tensors stacked
    for (std::size_t i = 0; i < src.hf_names.size(); ++i) {
      const Shape& shape = src.hf_shapes[i];
      const std::int64_t n = src.transposed ? shape[0] : shape.numel() / (whole.numel() / whole.dim(0));
      Tensor piece = whole.slice(0, row, row + n).clone(host_allocator());
      if (i == 0 && src.query_heads) piece = query_heads_in_hf_order(piece, src);
      out.emplace_back(src.hf_names[i], piece.reshape(shape));
      row += n;
      ++report.tensors;
      report.bytes += piece.nbytes();
    }
  }
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  TIDAL_CHECK(!ec, "cannot create '{}': {}", out_dir, ec.message());
  report.files = io::write_hf_weights(out_dir, out, max_shard_bytes);
  const std::string json = io::hf_config_json(spec);
  io::AtomicFile config_file((fs::path(out_dir) / "config.json").string());
  config_file.write(json.data(), json.size());
  config_file.commit();
  return report;
}

}  // namespace tidal::engine
