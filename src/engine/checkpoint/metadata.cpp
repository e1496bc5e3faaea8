#include "engine/checkpoint/metadata.h"

#include "core/error.h"
#include "io/checksum.h"
#include "io/safetensors.h"

#include <filesystem>
#include <fstream>

namespace tidal::engine {
namespace fs = std::filesystem;
namespace {

nlohmann::json shape_json(const Shape& s) { return s.vec(); }

// Reads one metadata.json with checks that name the file and the field.
class Fields {
 public:
  explicit Fields(std::string where) : where_(std::move(where)) {}

  const nlohmann::json& at(const nlohmann::json& j, const char* key, const std::string& in) const {
    TIDAL_CHECK(j.is_object() && j.contains(key), "{}: {} has no \"{}\" (not a complete tidal checkpoint?)", where_, in,
                key);
    return j.at(key);
  }
  std::int64_t integer(const nlohmann::json& j, const char* key, const std::string& in) const {
    const nlohmann::json& v = at(j, key, in);
    TIDAL_CHECK(v.is_number_integer(), "{}: {}.{} is not an integer", where_, in, key);
    return v.get<std::int64_t>();
  }
  std::string text(const nlohmann::json& j, const char* key, const std::string& in) const {
    const nlohmann::json& v = at(j, key, in);
    TIDAL_CHECK(v.is_string(), "{}: {}.{} is not a string", where_, in, key);
    return v.get<std::string>();
  }
  Shape shape(const nlohmann::json& j, const char* key, const std::string& in) const {
    const nlohmann::json& v = at(j, key, in);
    TIDAL_CHECK(v.is_array() && v.size() <= std::size_t(Shape::kMaxDims), "{}: {}.{} is not a shape", where_, in, key);
    Shape s;
    for (const nlohmann::json& x : v) {
      TIDAL_CHECK(x.is_number_integer() && x.get<std::int64_t>() >= 0, "{}: {}.{} holds {}, not an extent", where_, in,
                  key, x.dump());
      s.push_back(x.get<std::int64_t>());
    }
    return s;
  }
  std::optional<std::uint64_t> digest(const nlohmann::json& j, const char* key, const std::string& in) const {
    if (!j.contains(key)) return std::nullopt;
    return io::parse_checksum(text(j, key, in), fmt::format("{}: {}", where_, in));
  }
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

// A shape's elements, or tidal::Error when they pass 2^48 (a damaged or made-up metadata.json:
// the product must not overflow).
std::int64_t checked_numel(const Shape& shape, const std::string& what) {
  constexpr std::int64_t kMost = std::int64_t(1) << 48;
  std::int64_t n = 1;
  for (const std::int64_t d : shape) {
    TIDAL_CHECK(d <= kMost && (d == 0 || n <= kMost / d), "{}: a shape of {} is too large", what, shape.str());
    n *= d;
  }
  return n;
}

DType parse_dtype_tag(const std::string& s, const std::string& what) {
  const std::optional<DType> t = io::parse_safetensors_dtype(s);
  TIDAL_CHECK(t, "{}: dtype '{}' is none of F32, BF16, F16, I32", what, s);
  return *t;
}

// A block's pieces must lie inside the tensor and fill the stored rows' width.
void check_block(const StoredBlock& b, const StoredTensor& t, const std::string& what) {
  TIDAL_CHECK(b.shape.size() == t.shape.size() && !b.pieces.empty(), "{}: a block of shape {} for a tensor of shape {}",
              what, b.shape.str(), t.shape.str());
  std::int64_t rows = 0;
  for (const Piece& p : b.pieces) {
    TIDAL_CHECK(p.slice.start.size() == t.shape.size() && p.slice.extent.size() == t.shape.size(),
                "{}: a piece of {} dimensions in a tensor of {}", what, p.slice.start.size(), t.shape.size());
    for (int d = 0; d < t.shape.size(); ++d)  // in this form no sum overflows
      TIDAL_CHECK(p.slice.start[d] <= t.shape[d] && p.slice.extent[d] <= t.shape[d] - p.slice.start[d],
                  "{}: a piece [{}, +{}) past the tensor's {} in dimension {}", what, p.slice.start[d],
                  p.slice.extent[d], t.shape[d], d);
    for (int d = 1; d < t.shape.size(); ++d)
      TIDAL_CHECK(p.slice.extent[d] == b.shape[d], "{}: a piece {} wide in dimension {} of a block of shape {}", what,
                  p.slice.extent[d], d, b.shape.str());
    TIDAL_CHECK(p.row >= 0 && p.row <= b.shape[0] && p.slice.extent[0] <= b.shape[0] - p.row,
                "{}: a piece at rows [{}, +{}) of a block of {}", what, p.row, p.slice.extent[0], b.shape.str());
    rows += p.slice.extent[0];
    TIDAL_CHECK(rows <= b.shape[0], "{}: pieces of more rows than a block of {}", what, b.shape.str());
  }
  TIDAL_CHECK(rows == b.shape[0], "{}: pieces of {} rows in a block of {}", what, rows, b.shape.str());
}

// Format 1: whole tensors in model.safetensors (the weights) and optimizer.safetensors (the
// moments), the run's state in their metadata.
CheckpointMetadata read_whole_format(const fs::path& dir) {
  const io::SafetensorsReader weights((dir / "model.safetensors").string());
  const io::Metadata& wm = weights.metadata();
  TIDAL_CHECK(wm.count("format") && wm.at("format") == kWholeCheckpointFormat,
              "'{}' is not a tidal checkpoint (no metadata.json, and its model.safetensors has no format \"{}\")",
              dir.string(), kWholeCheckpointFormat);
  const io::SafetensorsReader moments((dir / "optimizer.safetensors").string());
  const io::Metadata& mm = moments.metadata();
  const auto get = [&](const io::Metadata& m, const char* key, const std::string& file) {
    TIDAL_CHECK(m.count(key), "'{}' has no metadata \"{}\" (not a tidal checkpoint?)", file, key);
    return m.at(key);
  };
  CheckpointMetadata out;
  out.format = kWholeCheckpointFormat;
  CheckpointInfo& info = out.info;
  try {
    info.step = std::stoll(get(wm, "step", weights.path()));
    info.optimizer.adamw_step = mm.count("adamw_step") ? std::stoll(mm.at("adamw_step")) : 0;
    if (mm.count("loss_scale")) {
      info.optimizer.loss_scale = std::stod(mm.at("loss_scale"));
      info.optimizer.loss_scale_good_steps = std::stoll(get(mm, "loss_scale_good_steps", moments.path()));
    }
  } catch (const std::logic_error&) {  // stoll / stod
    throw Error(fmt::format("'{}': a counter in its metadata is not a number", dir.string()));
  }
  info.config_toml = wm.count("config") ? wm.at("config") : "";
  info.layout = wm.count("layout") ? wm.at("layout") : "{}";
  int index = 0;
  for (const io::SafetensorsReader* f : {&weights, &moments}) {
    out.files.push_back({.name = fs::path(f->path()).filename().string(), .bytes = fs::file_size(f->path())});
    for (const auto& [name, e] : f->entries()) {
      StoredTensor& t = out.tensors[name];
      t.shape = e.shape;
      t.dtype = e.dtype;
      Slice whole{Shape(std::vector<std::int64_t>(std::size_t(e.shape.size()), 0)), e.shape};
      t.blocks.push_back({.file = index, .key = name, .shape = e.shape, .pieces = {Piece{.row = 0, .slice = whole}}});
    }
    ++index;
  }
  return out;
}

}  // namespace

nlohmann::json run_state_json(const CheckpointInfo& info) {
  nlohmann::json layout;
  try {
    layout = nlohmann::json::parse(info.layout);
  } catch (const nlohmann::json::exception&) {  // format 1's may be any text
    layout = info.layout;
  }
  return {{"step", info.step},
          {"consumed_samples", info.consumed_samples},
          {"seed", info.seed},
          {"optimizer",
           {{"adamw_step", info.optimizer.adamw_step},
            {"loss_scale", info.optimizer.loss_scale},
            {"loss_scale_good_steps", info.optimizer.loss_scale_good_steps}}},
          {"layout", layout}};
}

std::string rank_file_name(int rank) { return fmt::format("rank-{:05d}.safetensors", rank); }

nlohmann::json CheckpointMetadata::to_json() const {
  nlohmann::json files_json = nlohmann::json::array();
  for (const StoredFile& f : files) {
    nlohmann::json e = {{"file", f.name}, {"rank", f.rank}, {"bytes", f.bytes}};
    if (f.header_checksum) e["header_xxh3"] = io::checksum_hex(*f.header_checksum);
    files_json.push_back(e);
  }
  nlohmann::json tensors_json = nlohmann::json::object();
  for (const auto& [name, t] : tensors) {
    nlohmann::json blocks = nlohmann::json::array();
    for (const StoredBlock& b : t.blocks) {
      nlohmann::json pieces = nlohmann::json::array();
      for (const Piece& p : b.pieces)
        pieces.push_back({{"row", p.row}, {"start", shape_json(p.slice.start)}, {"extent", shape_json(p.slice.extent)}});
      nlohmann::json e = {{"file", b.file}, {"key", b.key}, {"shape", shape_json(b.shape)}, {"pieces", pieces}};
      if (!b.checksums.empty()) {
        nlohmann::json sums = nlohmann::json::array();
        for (std::uint64_t c : b.checksums) sums.push_back(io::checksum_hex(c));
        e["xxh3"] = sums;
      }
      blocks.push_back(e);
    }
    tensors_json[name] = {{"shape", shape_json(t.shape)}, {"dtype", io::safetensors_dtype(t.dtype)}, {"blocks", blocks}};
  }
  nlohmann::json out = run_state_json(info);
  out["format"] = format;
  out["checksum_segment_bytes"] = checksum_segment_bytes;
  out["config"] = info.config_toml;
  out["files"] = files_json;
  out["tensors"] = tensors_json;
  return out;
}

CheckpointMetadata CheckpointMetadata::from_json(const nlohmann::json& j, const std::string& where) {
  const Fields f(where);
  CheckpointMetadata out;
  out.format = f.text(j, "format", "the metadata");
  TIDAL_CHECK(out.format == kCheckpointFormat, "{}: format '{}'; this tidal reads \"{}\" (and \"{}\")", where,
              out.format, kCheckpointFormat, kWholeCheckpointFormat);
  CheckpointInfo& info = out.info;
  const std::int64_t segment = f.integer(j, "checksum_segment_bytes", "the metadata");
  TIDAL_CHECK(segment > 0, "{}: checksum_segment_bytes is {}", where, segment);
  out.checksum_segment_bytes = std::uint64_t(segment);
  info.step = f.integer(j, "step", "the metadata");
  info.consumed_samples = f.integer(j, "consumed_samples", "the metadata");
  TIDAL_CHECK(f.at(j, "seed", "the metadata").is_number_unsigned(), "{}: seed is not a whole number", where);
  info.seed = j.at("seed").get<std::uint64_t>();
  const nlohmann::json& opt = f.at(j, "optimizer", "the metadata");
  info.optimizer.adamw_step = f.integer(opt, "adamw_step", "optimizer");
  TIDAL_CHECK(f.at(opt, "loss_scale", "optimizer").is_number(), "{}: optimizer.loss_scale is not a number", where);
  info.optimizer.loss_scale = opt.at("loss_scale").get<double>();
  info.optimizer.loss_scale_good_steps = f.integer(opt, "loss_scale_good_steps", "optimizer");
  info.layout = f.at(j, "layout", "the metadata").dump();
  info.config_toml = f.text(j, "config", "the metadata");

  const nlohmann::json& files = f.at(j, "files", "the metadata");
  TIDAL_CHECK(files.is_array(), "{}: files is not an array", where);
  for (const nlohmann::json& e : files) {
    StoredFile s{.name = f.text(e, "file", "a file"), .rank = int(f.integer(e, "rank", "a file"))};
    TIDAL_CHECK(!s.name.empty() && s.name.find('/') == std::string::npos && s.name.find("..") == std::string::npos,
                "{}: file '{}' is not a file of the step directory", where, s.name);
    const std::int64_t bytes = f.integer(e, "bytes", s.name);
    TIDAL_CHECK(bytes >= 8, "{}: file '{}' of {} bytes", where, s.name, bytes);
    s.bytes = std::uint64_t(bytes);
    s.header_checksum = f.digest(e, "header_xxh3", s.name);
    out.files.push_back(s);
  }
  const nlohmann::json& tensors = f.at(j, "tensors", "the metadata");
  TIDAL_CHECK(tensors.is_object(), "{}: tensors is not an object", where);
  for (auto it = tensors.begin(); it != tensors.end(); ++it) {
    const std::string what = fmt::format("{}: tensor '{}'", where, it.key());
    StoredTensor t;
    t.shape = f.shape(it.value(), "shape", it.key());
    TIDAL_CHECK(t.shape.size() >= 1, "{}: a tensor of no dimensions", what);
    checked_numel(t.shape, what);
    t.dtype = parse_dtype_tag(f.text(it.value(), "dtype", it.key()), what);
    const nlohmann::json& blocks = f.at(it.value(), "blocks", it.key());
    TIDAL_CHECK(blocks.is_array(), "{}: blocks is not an array", what);
    for (const nlohmann::json& b : blocks) {
      StoredBlock s;
      const std::int64_t file = f.integer(b, "file", it.key());
      TIDAL_CHECK(file >= 0 && file < std::int64_t(out.files.size()), "{}: a block in file {} of {}", what, file,
                  out.files.size());
      s.file = int(file);
      s.key = f.text(b, "key", it.key());
      s.shape = f.shape(b, "shape", it.key());
      if (b.contains("xxh3")) {
        const nlohmann::json& sums = b.at("xxh3");
        TIDAL_CHECK(sums.is_array(), "{}: a block's xxh3 is not an array of checksums", what);
        for (const nlohmann::json& c : sums) {
          TIDAL_CHECK(c.is_string(), "{}: a block's checksum is not a string", what);
          s.checksums.push_back(io::parse_checksum(c.get<std::string>(), what));
        }
      }
      const nlohmann::json& pieces = f.at(b, "pieces", it.key());
      TIDAL_CHECK(pieces.is_array(), "{}: pieces is not an array", what);
      for (const nlohmann::json& p : pieces) {
        const std::int64_t row = f.integer(p, "row", it.key());
        s.pieces.push_back({.row = row, .slice = {f.shape(p, "start", it.key()), f.shape(p, "extent", it.key())}});
      }
      check_block(s, t, what);
      const std::uint64_t bytes = std::uint64_t(checked_numel(s.shape, what)) * dtype_size(t.dtype);
      TIDAL_CHECK(s.checksums.empty() ||
                      s.checksums.size() == (bytes + out.checksum_segment_bytes - 1) / out.checksum_segment_bytes,
                  "{}: a block of {} bytes with {} checksums of {}-byte segments", what, bytes, s.checksums.size(),
                  out.checksum_segment_bytes);
      t.blocks.push_back(std::move(s));
    }
    out.tensors.emplace(it.key(), std::move(t));
  }
  return out;
}

CheckpointMetadata read_metadata(const std::string& step_dir) {
  const fs::path dir(step_dir), file = dir / kMetadataFileName;
  CheckpointMetadata out;
  if (fs::exists(file)) {
    nlohmann::json j;
    try {
      std::ifstream in(file);
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw Error(fmt::format("'{}': malformed JSON ({}): the checkpoint is damaged", file.string(), e.what()));
    }
    out = CheckpointMetadata::from_json(j, file.string());
  } else {
    TIDAL_CHECK(fs::exists(dir / "model.safetensors"),
                "'{}' holds no metadata.json: not a complete tidal checkpoint (a save that did not finish?)", step_dir);
    out = read_whole_format(dir);
  }
  out.info.path = dir.string();
  return out;
}

std::string checkpoint_step_dir(const std::string& path) {
  fs::path dir(path);
  if (fs::exists(dir / kMetadataFileName) || fs::exists(dir / "model.safetensors")) return dir.string();
  std::ifstream latest(dir / "latest");
  TIDAL_CHECK(latest.good(), "'{}' is neither a checkpoint step directory nor a checkpoint directory with a 'latest' "
              "file", path);
  std::string name;
  std::getline(latest, name);
  TIDAL_CHECK(!name.empty() && name.find('/') == std::string::npos, "'{}/latest' names '{}', not a step directory",
              path, name);
  return (dir / name).string();
}

}  // namespace tidal::engine
