#include "sim/auto_layout.h"

#include "core/error.h"
#include "engine/progress.h"
#include "sim/calibrate.h"
#include "sim/cost_model.h"
#include "sim/hardware.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

namespace tidal::sim {
AutoLayout choose_layout(const config::Config& cfg, int world_size, comm::Communicator* world) {
  Hardware hardware;
  std::string measured;
  if (!cfg.parallel.hardware.empty()) {
    hardware = load_hardware(cfg.parallel.hardware);
  } else {
    TIDAL_CHECK(world && world->size() > 1,
                "parallel.auto measures this machine over the launched ranks when parallel.hardware is \"\": launch "
                "two ranks or more (mpirun -np N tidal train ...), or set parallel.hardware to a hardware file "
                "(configs/hardware/*.toml, or one tidal calibrate wrote)");
    hardware = calibrate(*world, {.quick = true});
    measured = " (measured at start-up)";
  }
  std::vector<Prediction> all;
  for (const config::Config& c : layouts(cfg, world_size)) all.push_back(predict(c, world_size, &hardware));
  TIDAL_CHECK(!all.empty(), "parallel.auto: no layout of {} ranks splits this model (model.n_head, model.n_embd and "
              "train.batch_size must divide as the modes need)", world_size);
  std::stable_sort(all.begin(), all.end(), [](const Prediction& a, const Prediction& b) {
    if (a.fits != b.fits) return a.fits;
    return a.fits ? a.time.total() < b.time.total() : a.peak_bytes < b.peak_bytes;
  });
  const Prediction& best = all.front();
  TIDAL_CHECK(best.fits, "parallel.auto: none of the {} layouts of {} ranks fits {}{}; the nearest, {}, does not: {}. "
              "Set memory.offload = \"chunk\", train.activation_checkpointing, or a smaller train.micro_batch_size",
              all.size(), world_size, hardware.name, measured, layout_words(best.layout), best.does_not_fit);
  AutoLayout out{.cfg = cfg, .why = ""};
  config::ParallelConfig& p = out.cfg.parallel;
  p.data = best.layout.at("parallel.data").get<int>();
  p.pipeline = best.layout.at("parallel.pipeline").get<int>();
  p.sequence = best.layout.at("parallel.sequence").get<int>();
  p.tensor.size = best.layout.at("parallel.tensor.size").get<int>();
  p.tensor.mode = best.layout.at("parallel.tensor.mode").get<std::string>() == "1d"   ? parallel::TensorMode::d1
                  : best.layout.at("parallel.tensor.mode").get<std::string>() == "2d" ? parallel::TensorMode::d2
                  : best.layout.at("parallel.tensor.mode").get<std::string>() == "3d" ? parallel::TensorMode::d3
                                                                                      : parallel::TensorMode::d2p5;
  p.tensor.depth = best.layout.value("parallel.tensor.depth", 1);
  p.tensor.keep_gathered = best.layout.value("parallel.tensor.keep_gathered", false);
  if (p.pipeline == 1) p.virtual_stages = 1;
  out.cfg.zero.stage = best.layout.at("zero.stage").get<int>();
  const double mfu = best.flops_per_step / best.time.total() / (world_size * hardware.peak_flops(cfg.train.precision));
  std::string runner_up;
  if (all.size() > 1 && all[1].fits)
    runner_up = fmt::format("; next {} at {:.3g} s", layout_words(all[1].layout), all[1].time.total());
  out.why = fmt::format(
      "parallel.auto: {} of {} layouts on {}{}: {}, predicted step {:.3g} s (MFU {:.0f}%), peak {} of {} per rank{}",
      "the fastest", all.size(), hardware.name, measured, layout_words(best.layout), best.time.total(), 100 * mfu,
      engine::human_bytes(std::uint64_t(best.peak_bytes)), engine::human_bytes(std::uint64_t(hardware.device_memory)),
      runner_up);
  return out;
}

}  // namespace tidal::sim
