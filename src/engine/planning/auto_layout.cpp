#include "engine/planning/auto_layout.h"

#include "core/bytes.h"
#include "core/error.h"
#include "engine/planning/planner.h"
#include "sim/calibrate.h"
#include "sim/cost_model.h"
#include "sim/hardware.h"

#include <fmt/format.h>

namespace tidal::engine {

using sim::Hardware;
using sim::Prediction;

AutoLayout choose_layout(const config::Config& cfg, int world_size, comm::Communicator* world) {
  Hardware hardware;
  std::string measured;
  if (!cfg.parallel.hardware.empty()) {
    hardware = sim::load_hardware(cfg.parallel.hardware);
  } else {
    TIDAL_CHECK(world && world->size() > 1,
                "parallel.auto measures this machine over the launched ranks when parallel.hardware is \"\": launch "
                "two ranks or more (mpirun -np N tidal train ...), or set parallel.hardware to a hardware file "
                "(configs/hardware/*.toml, or one tidal calibrate wrote)");
    hardware = sim::calibrate(*world, {.quick = true});
    measured = " (measured at start-up)";
  }
  const std::vector<PlannedLayout> all = plan_layouts(cfg, world_size, &hardware);
  TIDAL_CHECK(!all.empty(), "parallel.auto: no layout of {} ranks splits this model (model.n_head, model.n_embd and "
              "train.batch_size must divide as the modes need)", world_size);
  const Prediction& best = all.front().prediction;
  TIDAL_CHECK(best.fits, "parallel.auto: none of the {} layouts of {} ranks fits {}{}, not with activation "
              "checkpointing or more micro-batches either{}; the nearest, {}, does not: {}. {}",
              all.size(), world_size, hardware.name, measured,
              offload_plannable(&hardware) ? ", nor with memory.offload = \"chunk\"" : "", sim::layout_words(best.layout),
              best.does_not_fit,
              offload_plannable(&hardware) || cfg.memory.offload != config::Offload::none
                  ? "Use more ranks, or a smaller train.micro_batch_size"
                  : "Set memory.offload = \"chunk\" (and memory.device_limit), or use more ranks");
  AutoLayout out{.cfg = all.front().cfg, .why = ""};
  const double mfu = best.flops_per_step / best.time.total() / (world_size * hardware.peak_flops(cfg.train.precision));
  std::string runner_up;
  if (all.size() > 1 && all[1].prediction.fits)
    runner_up = fmt::format("; next {} at {:.3g} s", sim::layout_words(all[1].prediction.layout),
                            all[1].prediction.time.total());
  out.why = fmt::format(
      "parallel.auto: {} of {} layouts on {}{}: {}, predicted step {:.3g} s (MFU {:.0f}%), peak {} of {} per rank{}",
      "the fastest", all.size(), hardware.name, measured, sim::layout_words(best.layout), best.time.total(), 100 * mfu,
      human_bytes(std::uint64_t(best.peak_bytes)), human_bytes(std::uint64_t(hardware.device_memory)),
      runner_up);
  return out;
}

}  // namespace tidal::engine
