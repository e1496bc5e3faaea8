#include "engine/planning/planner.h"

#include "config/options.h"
#include "engine/planning/job.h"
#include "models/registry.h"
#include "core/bytes.h"
#include "core/error.h"
#include "parallel/context.h"

#include <fmt/format.h>

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace tidal::engine {

using sim::Hardware;
using sim::Prediction;

bool offload_plannable(const Hardware* hardware) {
  return hardware && hardware->device == Device::Kind::cuda && hardware->host_optimizer_bandwidth > 0;
}

bool ranks_before(const Prediction& a, const Prediction& b, bool timed) {
  if (a.fits != b.fits) return a.fits;
  return a.fits && timed ? a.time.total() < b.time.total() : a.needs_bytes < b.needs_bytes;
}

namespace {

// Micro-batches per step of a config (train.micro_batch_size unset: one, the whole local batch).
std::int64_t micro_batches_of(const config::Config& c) {
  const std::int64_t local = c.train.batch_size / c.parallel.data;
  return c.train.micro_batch_size ? local / c.train.micro_batch_size : 1;
}

// The layout's config with `micro_batches` micro-batches per step, `recompute` and `offload`, if
// the ranks can run it (the micro-batch divides as the layout needs, the schedule takes that many).
std::optional<config::Config> variant(const config::Config& c, int world_size, std::int64_t micro_batches,
                                      config::Recompute recompute, config::Offload offload,
                                      pipeline::ScheduleKind schedule) {
  const std::int64_t local = c.train.batch_size / c.parallel.data;
  if (micro_batches < 1 || local % micro_batches != 0) return std::nullopt;
  config::Config v = c;
  v.train.micro_batch_size = micro_batches == 1 ? c.train.micro_batch_size : local / micro_batches;
  v.parallel.schedule = schedule;
  if (schedule == pipeline::ScheduleKind::zb_v) v.parallel.virtual_stages = 2;
  v.train.activation_checkpointing = recompute;
  v.memory.offload = offload;
  try {
    config::check_layout(v);
    (void)parallel::ParallelContext::planned(config::context_options(v), world_size, 0);
  } catch (const Error&) {
    return std::nullopt;
  }
  return v;
}

// The cost model predicts each rank's peak within 5% of the allocators' (tests/sim/
// check_cost_model.py; on an H100 a GiB under nvidia-smi's, which adds the CUDA context): the
// planner leaves that much of the device free, so that what it picks fits the run.
constexpr double kMargin = 0.05;

void keep_margin(Prediction& p, const sim::Job& job, const Hardware* hardware) {
  const double capacity = sim::capacity_of_device(job, hardware);
  if (!p.fits || capacity <= 0 || p.needs_bytes <= (1 - kMargin) * capacity) return;
  p.fits = false;
  p.does_not_fit = fmt::format("device: a rank needs {}, within {:.0f}% of its {} (the margin the planner keeps: "
                               "the cost model's peaks are within 5%)",
                               human_bytes(std::uint64_t(p.needs_bytes)), 100 * kMargin,
                               human_bytes(std::uint64_t(capacity)));
}


// Notes in the prediction's layout what the planner set beyond the parallel keys.
void note_choices(Prediction& p, const config::Config& planned, const config::Config& asked) {
  if (planned.train.micro_batch_size != asked.train.micro_batch_size)
    p.layout["train.micro_batch_size"] = planned.train.micro_batch_size;
  if (planned.train.activation_checkpointing != asked.train.activation_checkpointing)
    p.layout["train.activation_checkpointing"] = std::string(config::name_of(planned.train.activation_checkpointing));
  if (planned.memory.offload != asked.memory.offload)
    p.layout["memory.offload"] = std::string(config::name_of(planned.memory.offload));
  if (planned.parallel.schedule != asked.parallel.schedule)
    p.layout["parallel.schedule"] = std::string(config::name_of(planned.parallel.schedule));
  if (planned.parallel.virtual_stages != asked.parallel.virtual_stages)
    p.layout["parallel.virtual_stages"] = planned.parallel.virtual_stages;
}

// One layout planned: its micro-batches where the config leaves them, and memory savers where it
// does not fit; the best variant (ranks_before), none where the ranks can run none.
std::optional<PlannedLayout> plan_layout(const config::Config& layout, int world_size, const Hardware* hardware) {
  const bool timed = hardware != nullptr;
  const std::int64_t configured = micro_batches_of(layout);
  std::optional<PlannedLayout> best;
  // Predicts a variant, kept if it ranks first so far; whether it fits.
  const auto consider = [&](std::int64_t micro_batches, config::Recompute recompute, config::Offload offload,
                            pipeline::ScheduleKind schedule) {
    std::optional<config::Config> v = variant(layout, world_size, micro_batches, recompute, offload, schedule);
    if (!v) return false;
    const sim::Job job = job_of(*v);
    Prediction p = sim::predict(job, world_size, hardware);
    keep_margin(p, job, hardware);
    note_choices(p, *v, layout);
    const bool fits = p.fits;
    if (!best || ranks_before(p, best->prediction, timed)) best = PlannedLayout{std::move(*v), std::move(p)};
    return fits;
  };
  // The pipeline's micro-batches, where the config leaves them to the planner.
  std::vector<std::int64_t> counts = {configured};
  const int p = layout.parallel.pipeline;
  if (p > 1 && layout.train.micro_batch_size == 0)
    for (std::int64_t m : {std::int64_t(p), 2 * std::int64_t(p), 4 * std::int64_t(p)}) counts.push_back(m);
  // And the zero-bubble schedules beside 1F1B (the default): at 1F1B's activations, W's where it idles.
  std::vector<pipeline::ScheduleKind> schedules = {layout.parallel.schedule};
  if (p > 1 && layout.parallel.schedule == pipeline::ScheduleKind::one_f_one_b)
    for (pipeline::ScheduleKind zb : {pipeline::ScheduleKind::zb_h1, pipeline::ScheduleKind::zb_v}) schedules.push_back(zb);
  const config::Offload offload = layout.memory.offload;
  for (std::int64_t m : counts)
    for (pipeline::ScheduleKind schedule : schedules) consider(m, layout.train.activation_checkpointing, offload, schedule);
  if (!best) return std::nullopt;
  // Memory savers where it does not fit: each recomputation (none, selective, blocks) with the
  // fewest micro-batches that fit it (more only shrink the products further); the fastest. Where
  // none fits, the same with the model data in chunks that move to the host (memory.offload =
  // "chunk", PatrickStar's dynamic partition), its moves and host AdamW in the time.
  if (!best->prediction.fits) {
    const std::int64_t m = micro_batches_of(best->cfg);
    const pipeline::ScheduleKind schedule = best->cfg.parallel.schedule;
    using config::Recompute;
    const Recompute asked = layout.train.activation_checkpointing;
    std::vector<Recompute> recomputes = {asked};
    if (asked == Recompute::none) recomputes.push_back(Recompute::selective);
    if (asked != Recompute::blocks && asked != Recompute::every_k) recomputes.push_back(Recompute::blocks);
    const auto savers = [&](config::Offload o) {
      for (Recompute r : recomputes)
        for (std::int64_t more : {m, 2 * m, 4 * m, 8 * m}) {
          if (r == asked && more == m && o == offload) continue;  // tried above
          if (consider(more, r, o, schedule)) break;
        }
    };
    savers(offload);
    if (!best->prediction.fits && offload == config::Offload::none && offload_plannable(hardware))
      savers(config::Offload::chunk);
  }
  return best;
}

}  // namespace

std::vector<config::Config> layouts(const config::Config& cfg, int world_size) {
  std::vector<config::Config> out;
  const auto divisors = [](int n) {
    std::vector<int> d;
    for (int k = 1; k <= n; ++k)
      if (n % k == 0) d.push_back(k);
    return d;
  };
  struct Tensor {
    int size;
    parallel::TensorMode mode;
    int depth;
  };
  for (int pp : divisors(world_size))
    for (int rest : divisors(world_size / pp)) {
      const int data = world_size / pp / rest;
      std::vector<Tensor> tensors = {{rest, parallel::TensorMode::d1, 1}};
      for (int q = 2; q * q <= rest; ++q) {
        if (q * q == rest) tensors.push_back({rest, parallel::TensorMode::d2, 1});
        if (rest % (q * q) == 0 && rest / (q * q) > 1) tensors.push_back({rest, parallel::TensorMode::d2p5, rest / (q * q)});
        if (q * q * q == rest) tensors.push_back({rest, parallel::TensorMode::d3, 1});
      }
      std::vector<std::pair<Tensor, int>> splits;  // (tensor, sequence)
      for (const Tensor& t : tensors) splits.push_back({t, 1});
      if (rest > 1) splits.push_back({{1, parallel::TensorMode::d1, 1}, rest});
      // A mixture's experts spread over groups of data ranks (parallel.expert): each divisor of
      // the data ranks that divides the experts.
      std::vector<int> experts = {1};
      if (const int mixture = models::model_traits(cfg.model).experts; mixture > 0)
        for (int e : divisors(data))
          if (e > 1 && mixture % e == 0) experts.push_back(e);
      for (const auto& [t, seq] : splits)
        for (int zero = 0; zero <= (data * seq > 1 ? 3 : 0); ++zero)
          for (int expert : experts)
            for (bool keep : {false, true}) {
              config::Config c = cfg;
              c.parallel.data = data;
              c.parallel.pipeline = pp;
              c.parallel.tensor.size = t.size;
              c.parallel.tensor.mode = t.mode;
              c.parallel.tensor.depth = t.depth;
              // 2.5D and 3D each way: less traffic for more memory (a 2.5D depth layer's whole
              // weight blocks, colossal-ai.txt Table I's S_w; a 3D linear's gathered input kept).
              c.parallel.tensor.keep_gathered = keep;
              if (keep && !keeps_gathered_choice(c.parallel.tensor)) continue;
              c.parallel.sequence = seq;
              c.parallel.expert = expert;
              c.zero.stage = zero;
              if (pp == 1) c.parallel.virtual_stages = 1;
              try {
                config::check_layout(c);  // a ViT split by position, a schedule that cannot run
                (void)parallel::ParallelContext::planned(config::context_options(c), world_size, 0);
              } catch (const Error&) {
                continue;
              }
              out.push_back(std::move(c));
            }
    }
  return out;
}

std::vector<PlannedLayout> plan_layouts(const config::Config& cfg, int world_size, const Hardware* hardware) {
  const bool timed = hardware != nullptr;
  const std::vector<config::Config> all = layouts(cfg, world_size);
  // The layouts share nothing (each builds and replays a world of its own), so they are planned on
  // this process's threads (OpenMP's count: under mpirun, the rank's share of the node's cores),
  // each taking the next layout not yet taken; the results go in layout order, as one thread's would.
  std::vector<std::optional<PlannedLayout>> planned(all.size());
  std::atomic<std::size_t> next{0};
  std::mutex failed;
  std::exception_ptr failure;
  const auto work = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < all.size();) {
      try {
        planned[i] = plan_layout(all[i], world_size, hardware);
      } catch (...) {
        const std::lock_guard lock(failed);
        if (!failure) failure = std::current_exception();
      }
    }
  };
  const std::size_t threads = std::min<std::size_t>(all.size(), std::size_t(std::max(1, omp_get_max_threads())));
  std::vector<std::thread> helpers;
  for (std::size_t t = 1; t < threads; ++t) helpers.emplace_back(work);
  work();
  for (std::thread& h : helpers) h.join();
  if (failure) std::rethrow_exception(failure);
  std::vector<PlannedLayout> out;
  for (std::optional<PlannedLayout>& p : planned)
    if (p) out.push_back(std::move(*p));
  std::stable_sort(out.begin(), out.end(), [timed](const PlannedLayout& a, const PlannedLayout& b) {
    return ranks_before(a.prediction, b.prediction, timed);
  });
  return out;
}

}  // namespace tidal::engine
