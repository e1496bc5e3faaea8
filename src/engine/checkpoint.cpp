#include "engine/checkpoint.h"

#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "nn/tp/shard.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

namespace tidal::engine {
namespace fs = std::filesystem;
namespace {

std::string step_name(std::int64_t step) { return fmt::format("step-{:08d}", step); }

void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

void prune(const fs::path& dir, const std::string& latest, int keep) {
  std::vector<std::string> steps;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || !name.starts_with("step-")) continue;
    if (name.find(".tmp-") != std::string::npos) {
      // A temporary left by a writer that died (never ours: ours was renamed already).
      fs::remove_all(e.path());
      continue;
    }
    steps.push_back(name);
  }
  std::sort(steps.begin(), steps.end());
  const std::ptrdiff_t excess = std::ptrdiff_t(steps.size()) - keep;
  for (std::ptrdiff_t i = 0; i < excess; ++i)
    if (steps[std::size_t(i)] != latest) fs::remove_all(dir / steps[std::size_t(i)]);
}

// Stage s > 0 sends stage 0 the whole weight and moments of each parameter in sent_by[s]; stage 0
// appends them to its own. `params` are this rank's, weights[i] and moments[2i], moments[2i+1]
// theirs.
void share_with_first_stage(const PipelineShare& share, const std::vector<const nn::Parameter*>& params,
                            NamedTensors& weights, NamedTensors& moments) {
  comm::Communicator& group = *share.group;
  constexpr int kTag = 1 << 20;  // apart from the engine's activation and gradient tags
  const int stage = group.rank();
  if (stage > 0) {
    std::vector<comm::WorkPtr> sends;
    for (const nn::Parameter* p : share.sent_by[std::size_t(stage)]) {
      const auto at = std::find(params.begin(), params.end(), p);
      TIDAL_ASSERT(at != params.end(), "stage {} does not hold {}, which it should save", stage, p->name);
      const std::size_t i = std::size_t(at - params.begin());
      for (const Tensor* t : {&weights[i].second, &moments[2 * i].second, &moments[2 * i + 1].second})
        sends.push_back(group.send(*t, 0, {.tag = kTag}));
    }
    for (const comm::WorkPtr& w : sends) w->wait();
    return;
  }
  for (int s = 1; s < group.size(); ++s)
    for (const nn::Parameter* p : share.sent_by[std::size_t(s)]) {
      const Shape& full = p->full_shape.size() ? p->full_shape : p->shape;
      Tensor w = Tensor::empty(full, DType::f32, host_allocator()), m = Tensor::empty(full, DType::f32, host_allocator()),
             v = Tensor::empty(full, DType::f32, host_allocator());
      for (Tensor* t : {&w, &m, &v}) group.recv(*t, s, {.tag = kTag})->wait();
      weights.emplace_back(p->name, w);
      moments.emplace_back("m." + p->name, m);
      moments.emplace_back("v." + p->name, v);
    }
}

}  // namespace

void save_checkpoint(const std::string& dir, std::int64_t step, const std::vector<ParameterState>& local,
                     const OptimizerMeta& meta, const std::string& config_toml, int keep, const std::string& layout,
                     const SaveGroups& groups) {
  comm::Communicator* tensor_group = groups.tensor;
  auto whole = [&](const nn::Parameter& p, const Tensor& block) {
    if (p.full_shape.size() == 0) return block;
    TIDAL_ASSERT(tensor_group, "{} is a shard: saving it needs its tensor group", p.name);
    return nn::tp::gather_parameter(p, block, *tensor_group);
  };
  NamedTensors weights, moments;
  std::vector<const nn::Parameter*> params;
  for (const ParameterState& s : local) {
    const nn::Parameter& p = *s.param;
    params.push_back(&p);
    weights.emplace_back(p.name, whole(p, s.weight));
    moments.emplace_back("m." + p.name, whole(p, s.momentum));
    moments.emplace_back("v." + p.name, whole(p, s.variance));
  }
  if (groups.pipeline && groups.pipeline->group->size() > 1 && (!tensor_group || tensor_group->rank() == 0))
    share_with_first_stage(*groups.pipeline, params, weights, moments);
  if (!groups.writer) return;
  write_checkpoint(dir, step, weights, moments, meta, config_toml, keep, layout);
}

void save_checkpoint(const std::string& dir, std::int64_t step, optim::AdamW& adam, const std::string& config_toml,
                     int keep, const std::string& layout, const SaveGroups& groups) {
  std::vector<ParameterState> local;
  const auto& params = adam.parameters();
  for (std::size_t i = 0; i < params.size(); ++i)
    local.push_back({params[i], params[i]->data, adam.momentum(i), adam.variance(i)});
  save_checkpoint(dir, step, local, {.adamw_step = adam.steps_taken()}, config_toml, keep, layout, groups);
}

void write_checkpoint(const std::string& dir, std::int64_t step, const NamedTensors& weights, const NamedTensors& moments,
                      const OptimizerMeta& meta, const std::string& config_toml, int keep, const std::string& layout) {
  const fs::path root(dir);
  std::error_code ec;
  fs::create_directories(root, ec);
  TIDAL_CHECK(!ec, "cannot create checkpoint.dir '{}': {}", dir, ec.message());
  // A step saved again (a second run into the same directory) gets a fresh name: the directory
  // `latest` names is never touched before its replacement is complete.
  std::string name = step_name(step);
  for (int n = 1; fs::exists(root / name); ++n) name = fmt::format("{}-{}", step_name(step), n);
  const fs::path tmp = root / fmt::format("{}.tmp-{}", name, ::getpid());
  try {
    fs::remove_all(tmp);
    fs::create_directory(tmp);
    io::save_safetensors((tmp / "model.safetensors").string(), weights,
                         {{"format", kCheckpointFormat}, {"step", std::to_string(step)}, {"config", config_toml},
                          {"layout", layout}});
    std::map<std::string, std::string> counters{{"format", kCheckpointFormat},
                                                {"adamw_step", std::to_string(meta.adamw_step)}};
    if (meta.loss_scale > 0) {
      counters["loss_scale"] = fmt::format("{}", meta.loss_scale);
      counters["loss_scale_good_steps"] = std::to_string(meta.loss_scale_good_steps);
    }
    io::save_safetensors((tmp / "optimizer.safetensors").string(), moments, counters);
    fsync_dir(tmp);
    fs::rename(tmp, root / name);
  } catch (const std::exception& e) {  // a full disk, a quota, a directory gone: the half-written step goes
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    std::ifstream previous(root / "latest");
    std::string last;
    std::getline(previous, last);
    throw Error(fmt::format("the checkpoint of step {} was not written ({}); {}: free space where checkpoint.dir "
                            "'{}' lives, or write fewer (checkpoint.every, checkpoint.keep)",
                            step, e.what(),
                            last.empty() ? "no earlier checkpoint is in that directory"
                                         : fmt::format("the last complete one, '{}', stays as 'latest'", last),
                            dir));
  }
  fsync_dir(root);
  io::AtomicFile latest((root / "latest").string());
  latest.write(name.data(), name.size());
  latest.commit();
  prune(root, name, keep);
}

std::string checkpoint_step_dir(const std::string& path) {
  fs::path dir(path);
  if (!fs::exists(dir / "model.safetensors")) {
    std::ifstream latest(dir / "latest");
    TIDAL_CHECK(latest.good(), "'{}' is neither a checkpoint step directory nor a checkpoint directory with a 'latest' "
                "file", path);
    std::string name;
    std::getline(latest, name);
    dir /= name;
  }
  return dir.string();
}

StoredCheckpoint open_checkpoint(const std::string& path) {
  StoredCheckpoint c;
  c.step_dir = checkpoint_step_dir(path);
  c.weights = std::make_unique<io::SafetensorsReader>((fs::path(c.step_dir) / "model.safetensors").string());
  const io::Metadata& meta = c.weights->metadata();
  TIDAL_CHECK(meta.count("format") && meta.at("format") == kCheckpointFormat,
              "'{}' is not a tidal checkpoint (its model.safetensors has no format \"{}\")", c.step_dir,
              kCheckpointFormat);
  TIDAL_CHECK(meta.count("config"), "'{}': the checkpoint stores no config", c.step_dir);
  c.config = config::load_config_text(meta.at("config"), c.step_dir + " (stored config)");
  return c;
}

CheckpointInfo load_checkpoint(const std::string& path, optim::AdamW& adam) {
  const fs::path dir(checkpoint_step_dir(path));
  io::SafetensorsFile weights = io::load_safetensors((dir / "model.safetensors").string());
  io::SafetensorsFile moments = io::load_safetensors((dir / "optimizer.safetensors").string());
  TIDAL_CHECK(weights.metadata["format"] == kCheckpointFormat, "'{}' is not a tidal checkpoint (format '{}')", dir.string(),
              weights.metadata["format"]);
  // `into` is p's block (p.data or a moment); the file holds the whole tensor.
  auto take = [&](io::SafetensorsFile& f, const std::string& name, const nn::Parameter& p, Tensor& into) {
    auto it = f.tensors.find(name);
    TIDAL_CHECK(it != f.tensors.end(), "checkpoint '{}' has no tensor '{}': was it saved from another model config?",
                dir.string(), name);
    const Shape& full = p.full_shape.size() ? p.full_shape : p.shape;
    TIDAL_CHECK(it->second.shape() == full && it->second.dtype() == into.dtype(),
                "checkpoint '{}': '{}' is {} but the model has {} {}", dir.string(), name, it->second.str(),
                dtype_name(into.dtype()), full.str());
    into.copy_from(nn::tp::shard_of(p, it->second));
  };
  const auto& params = adam.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    take(weights, params[i]->name, *params[i], params[i]->data);
    take(moments, "m." + params[i]->name, *params[i], adam.momentum(i));
    take(moments, "v." + params[i]->name, *params[i], adam.variance(i));
  }
  CheckpointInfo info;
  info.step = std::stoll(weights.metadata.at("step"));
  info.config_toml = weights.metadata["config"];
  info.layout = weights.metadata["layout"];
  info.path = dir.string();
  info.optimizer.adamw_step = std::stoll(moments.metadata.at("adamw_step"));
  if (moments.metadata.count("loss_scale")) {
    info.optimizer.loss_scale = std::stod(moments.metadata.at("loss_scale"));
    info.optimizer.loss_scale_good_steps = std::stoll(moments.metadata.at("loss_scale_good_steps"));
  }
  adam.set_steps_taken(info.optimizer.adamw_step);
  return info;
}

}  // namespace tidal::engine
