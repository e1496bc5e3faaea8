#include "engine/checkpoint/inspect.h"

#include "core/bytes.h"
#include "engine/checkpoint/reader.h"
#include "io/safetensors.h"

#include <filesystem>
#include <map>

namespace tidal::engine {
namespace fs = std::filesystem;
namespace {

bool is_moment(const std::string& name) { return name.starts_with("m.") || name.starts_with("v."); }

std::string range_text(const Piece& p) {
  std::string out;
  for (int d = 0; d < p.slice.start.size(); ++d)
    out += fmt::format("{}{}:{}", d ? ", " : "", p.slice.start[d], p.slice.start[d] + p.slice.extent[d]);
  return "[" + out + "]";
}

std::string layout_text(const nlohmann::json& l) {
  if (!l.is_object() || !l.contains("world_size")) return l.dump();
  const int world = l.value("world_size", 1);
  return fmt::format("{} rank{}: data {} x pipeline {} x tensor {} ({}) x sequence {}", world, world > 1 ? "s" : "",
                     l.value("data", 1), l.value("pipeline", 1), l.value("tensor", 1), l.value("tensor_mode", "1d"),
                     l.value("sequence", 1));
}

}  // namespace

nlohmann::json inspect_checkpoint(const std::string& path, bool verify) {
  CheckpointReader reader(path);
  const CheckpointMetadata& meta = reader.metadata();
  const CheckpointInfo& info = meta.info;
  nlohmann::json files = nlohmann::json::array();
  std::vector<std::int64_t> blocks(meta.files.size(), 0), bytes(meta.files.size(), 0);
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& [name, t] : meta.tensors) {
    nlohmann::json tb = nlohmann::json::array();
    for (const StoredBlock& b : t.blocks) {
      ++blocks[std::size_t(b.file)];
      bytes[std::size_t(b.file)] += b.shape.numel() * std::int64_t(dtype_size(t.dtype));
      nlohmann::json pieces = nlohmann::json::array();
      for (const Piece& p : b.pieces) pieces.push_back({{"start", p.slice.start.vec()}, {"extent", p.slice.extent.vec()}});
      tb.push_back({{"file", meta.files[std::size_t(b.file)].name},
                    {"rank", meta.files[std::size_t(b.file)].rank},
                    {"shape", b.shape.vec()},
                    {"pieces", pieces}});
    }
    tensors.push_back({{"name", name}, {"shape", t.shape.vec()}, {"dtype", std::string(dtype_name(t.dtype))}, {"blocks", tb}});
  }
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < meta.files.size(); ++i) {
    const StoredFile& f = meta.files[i];
    files.push_back({{"file", f.name}, {"rank", f.rank}, {"bytes", f.bytes}, {"blocks", blocks[i]}, {"data_bytes", bytes[i]}});
    total += f.bytes;
  }
  nlohmann::json out = run_state_json(info);
  out["path"] = reader.step_dir();
  out["format"] = meta.format;
  out["files"] = files;
  out["total_bytes"] = total;
  out["tensors"] = tensors;
  const bool has_checksums = meta.format == kCheckpointFormat;
  if (verify && has_checksums) out["verified_bytes"] = reader.verify_all();
  out["checksums"] = !has_checksums ? "none (format 1)" : verify ? "verified" : "not verified";
  return out;
}

std::string inspect_text(const nlohmann::json& r) {
  std::string out = fmt::format("checkpoint {} ({})\n", r["path"].get<std::string>(), r["format"].get<std::string>());
  out += fmt::format("  step {}, {} training samples consumed, seed {}; AdamW step {}{}\n", r["step"].get<std::int64_t>(),
                     r["consumed_samples"].get<std::int64_t>(), r["seed"].get<std::uint64_t>(),
                     r["optimizer"]["adamw_step"].get<std::int64_t>(),
                     r["optimizer"]["loss_scale"].get<double>() > 0
                         ? fmt::format(", loss scale {}", r["optimizer"]["loss_scale"].get<double>())
                         : "");
  out += fmt::format("  saved by {}\n\n", layout_text(r["layout"]));
  out += fmt::format("  {:>5}  {:<26} {:>12} {:>7}\n", "rank", "file", "bytes", "blocks");
  for (const nlohmann::json& f : r["files"])
    out += fmt::format("  {:>5}  {:<26} {:>12} {:>7}\n", f["rank"].get<int>(), f["file"].get<std::string>(),
                       human_bytes(f["bytes"].get<std::uint64_t>()), f["blocks"].get<std::int64_t>());
  out += fmt::format("  {:>5}  {:<26} {:>12}\n\n", "", "total", human_bytes(r["total_bytes"].get<std::uint64_t>()));
  out += fmt::format("  {:<44} {:<18} {}\n", "tensor", "shape", "blocks (rank: rows x columns ...)");
  for (const nlohmann::json& t : r["tensors"]) {
    std::string where;
    for (const nlohmann::json& b : t["blocks"])
      for (const nlohmann::json& p : b["pieces"]) {
        Piece piece{.row = 0, .slice = {Shape(p["start"].get<std::vector<std::int64_t>>()),
                                        Shape(p["extent"].get<std::vector<std::int64_t>>())}};
        where += fmt::format("{}{}: {}", where.empty() ? "" : "  ", b["rank"].get<int>(), range_text(piece));
      }
    out += fmt::format("  {:<44} {:<18} {}\n", t["name"].get<std::string>(), Shape(t["shape"].get<std::vector<std::int64_t>>()).str(),
                       where);
  }
  out += "\n  checksums: ";
  if (r.contains("verified_bytes"))
    out += fmt::format("every block verified ({} read)\n", human_bytes(r["verified_bytes"].get<std::uint64_t>()));
  else
    out += r["checksums"].get<std::string>() + "\n";
  return out;
}

std::uint64_t consolidate_checkpoint(const std::string& path, const std::string& out) {
  CheckpointReader reader(path);
  const CheckpointMetadata& meta = reader.metadata();
  const CheckpointInfo& info = meta.info;
  std::error_code ec;
  fs::create_directories(out, ec);
  TIDAL_CHECK(!ec, "cannot create '{}': {}", out, ec.message());
  io::Metadata moments_meta{{"format", kWholeCheckpointFormat}, {"adamw_step", std::to_string(info.optimizer.adamw_step)}};
  if (info.optimizer.loss_scale > 0) {
    moments_meta["loss_scale"] = fmt::format("{}", info.optimizer.loss_scale);
    moments_meta["loss_scale_good_steps"] = std::to_string(info.optimizer.loss_scale_good_steps);
  }
  const io::Metadata weights_meta{{"format", kWholeCheckpointFormat}, {"step", std::to_string(info.step)},
                                  {"config", info.config_toml}, {"layout", info.layout}};
  std::uint64_t written = 0;
  for (const bool moments : {false, true}) {
    std::vector<io::SafetensorsWriter::Entry> entries;
    for (const auto& [name, t] : meta.tensors)
      if (is_moment(name) == moments) entries.push_back({name, t.dtype, t.shape});
    io::SafetensorsWriter file((fs::path(out) / (moments ? "optimizer.safetensors" : "model.safetensors")).string(),
                               entries, moments ? moments_meta : weights_meta);
    for (const io::SafetensorsWriter::Entry& e : entries) file.append(reader.read_whole(e.name));
    file.commit();
    written += file.file_bytes();
  }
  return written;
}

}  // namespace tidal::engine
