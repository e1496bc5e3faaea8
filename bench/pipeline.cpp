// Pipeline parallelism, measured on a GPT (8 layers, width 256, 8 heads, sequence 128) with 8
// micro-batches of 2 sequences per step. Run under mpirun -np P with P = 2 or 4 (even).
//
// 1. Bubble: for GPipe, 1F1B and interleaved 1F1B (2 virtual stages), pipeline = P: each stage's
//    idle fraction of a step - 1 - (its forward and backward time) / (the step's time), mean of
//    3 steps after a warm-up - beside the schedule's bubble (p-1)/(m+p-1), interleaved
//    (p-1)/(v m+p-1) (Megatron-LM sec. 2.2). Idle time is time the stage waits on its
//    neighbours; on a machine with fewer cores than ranks, concurrently busy stages share cores
//    and the measured fractions drift from the formulas (the config line says how many cores).
// 2. Activation memory: each stage's peak of the activation allocator over those steps (inputs
//    received, what backward keeps, gradients). 1F1B keeps at most p - s micro-batches in
//    flight on stage s, GPipe all m; the ratio is printed.
// 3. Bytes between stages with 1D tensor parallelism (P >= 4: pipeline P/2 x tensor 2): the
//    pipeline group's send bytes per step with parallel.scatter_gather off and on, their ratio
//    (t = 2 expected), and the tensor-group all-gather bytes scatter-gather adds.
//
// --verify: exit 1 unless 1F1B's activation peak is below GPipe's on every stage, the bytes
// ratio is within 1% of t, and every schedule's losses equal GPipe's within 1e-5 relative.
//
//   mpirun -np 4 bench_pipeline [--verify]
#include "comm/mpi_runtime.h"
#include "config/options.h"
#include "data/data_options.h"
#include "models/factory.h"
#include "nn/cross_entropy_loss.h"
#include "nn/parallel_layers.h"
#include "nn/runner.h"
#include "parallel/context.h"
#include "pipeline/engine.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace tidal;

namespace {

constexpr int kMicroBatches = 8, kMicro = 2, kTimedSteps = 3;

config::Config gpt(int pipeline, int tensor) {
  config::Config cfg;
  config::ModelConfig& c = cfg.model;
  c.type = "gpt";
  c.n_layer = 8;
  c.n_embd = 256;
  c.n_head = 8;
  c.seq_len = 128;
  c.vocab_size = 512;
  c.dropout = 0.0f;
  cfg.train.batch_size = kMicroBatches * kMicro;
  cfg.train.micro_batch_size = kMicro;
  cfg.parallel.pipeline = pipeline;
  cfg.parallel.tensor.size = tensor;
  return cfg;
}

struct Run {
  std::vector<double> losses;
  double idle = 0;              // this rank's mean idle fraction over the timed steps
  double activation_peak = 0;   // this rank's peak activation bytes
  double pipeline_sent = 0;     // bytes this rank sent to other stages, per step
  double tensor_gathered = 0;   // bytes this rank sent in tensor-group all-gathers, per step
};

double stat(const parallel::ParallelContext& pc, const char* group, const char* op) {
  const nlohmann::json stats = pc.communication_stats();
  if (!stats.contains(group) || !stats[group].contains(op)) return 0;
  return stats[group][op]["bytes_sent"].get<double>();
}

Run run(comm::MpiRuntime& mpi, comm::Communicator& world, const config::Config& cfg, pipeline::ScheduleKind kind,
        int chunks, bool scatter_gather) {
  parallel::ParallelContext pc(config::context_options(cfg), &mpi);
  const auto layers = nn::make_layers(pc);
  auto model = models::make_model(cfg.model, {}, *layers);
  pipeline::PipelineOptions options;
  options.schedule = kind;
  options.chunks = chunks;
  options.scatter_gather = scatter_gather;
  pipeline::PipelineEngine engine(*model, pc, options);
  engine.materialize(7);
  auto dataset = data::make_dataset(config::data_options(cfg));
  HostAllocator activations;
  nn::Runner runner;
  Run out;
  for (int step = 0; step < 1 + kTimedSteps; ++step) {
    std::vector<nn::Batch> batches;
    std::vector<pipeline::MicroBatch> micro;
    for (int m = 0; m < kMicroBatches; ++m)
      batches.push_back(dataset->batch(std::int64_t(step * kMicroBatches + m) * kMicro, kMicro, data::Split::train));
    for (int m = 0; m < kMicroBatches; ++m)
      micro.push_back({&batches[std::size_t(m)], m * kMicro, 1.0f / kMicroBatches});
    const nn::StepState state{.runner = &runner, .training = true, .seed = 7, .step = std::uint32_t(step),
                              .activations = &activations};
    engine.zero_grad();
    world.barrier()->wait();  // every stage starts the step together
    if (step == 1) pc.reset_communication_stats();
    out.losses.push_back(engine.train(micro, state));
    if (step == 0) continue;
    const pipeline::StepProfile& p = engine.last_step();
    out.idle += (1.0 - p.compute_seconds / p.seconds) / kTimedSteps;
  }
  out.activation_peak = double(activations.peak_bytes());
  out.pipeline_sent = stat(pc, "pipeline", "send") / kTimedSteps;
  out.tensor_gathered = stat(pc, "tensor", "all_gather") / kTimedSteps;
  return out;
}

// Every rank's value of x, gathered to all.
std::vector<double> gather(comm::Communicator& world, double x) {
  Tensor in = Tensor::full({1}, float(x)), out = Tensor::empty({world.size()});
  world.all_gather(out, in)->wait();
  return {out.data<float>(), out.data<float>() + world.size()};
}

std::string mib(double bytes) { return fmt::format("{:.2f} MiB", bytes / double(1ull << 20)); }

}  // namespace

int main(int argc, char** argv) {
  bool verify = false;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--verify") == 0) verify = true;
  comm::MpiRuntime mpi(&argc, &argv);
  auto world = mpi.world(comm::Seconds(1800));
  const int P = world->size();
  const bool main_rank = world->rank() == 0;
  if (P < 2 || P % 2) {
    if (main_rank) fmt::print("bench_pipeline: run with mpirun -np 2 or -np 4\n");
    return 2;
  }
  bool ok = true;
  const int m = kMicroBatches;
  if (main_rank)
    fmt::print("# GPT 8 layers, width 256, 8 heads, sequence 128, vocabulary 512, fp32; {} micro-batches of {} "
               "per step; {} ranks on {} cores\n",
               m, kMicro, P, std::thread::hardware_concurrency());

  struct Schedule {
    const char* name;
    pipeline::ScheduleKind kind;
    int chunks;
  };
  const Schedule schedules[] = {{"gpipe", pipeline::ScheduleKind::gpipe, 1},
                                {"1f1b", pipeline::ScheduleKind::one_f_one_b, 1},
                                {"interleaved v=2", pipeline::ScheduleKind::interleaved, 2}};
  std::vector<Run> runs;
  for (const Schedule& s : schedules) runs.push_back(run(mpi, *world, gpt(P, 1), s.kind, s.chunks, true));
  std::vector<std::vector<double>> idle, peak;
  for (const Run& r : runs) {
    idle.push_back(gather(*world, r.idle));
    peak.push_back(gather(*world, r.activation_peak));
  }
  if (main_rank) {
    fmt::print("\n# 1. Idle fraction per stage (pipeline {}, {} micro-batches), measured vs the schedule's bubble\n", P, m);
    fmt::print("{:<16} {}  {:>8}\n", "schedule", [&] {
      std::string h;
      for (int s = 0; s < P; ++s) h += fmt::format("{:>9}", fmt::format("stage {}", s));
      return h;
    }(), "formula");
    for (std::size_t k = 0; k < runs.size(); ++k) {
      const double v = schedules[k].chunks;
      const double formula = double(P - 1) / (v * m + P - 1);
      std::string row;
      for (int s = 0; s < P; ++s) row += fmt::format("{:>9.3f}", idle[k][std::size_t(s)]);
      fmt::print("{:<16} {}  {:>8.3f}   {}\n", schedules[k].name, row, formula,
                 schedules[k].chunks > 1 ? "(p-1)/(v m+p-1)" : "(p-1)/(m+p-1)");
    }
    fmt::print("\n# 2. Peak activation memory per stage\n");
    for (std::size_t k = 0; k < runs.size(); ++k) {
      std::string row;
      for (int s = 0; s < P; ++s) row += fmt::format("{:>12}", mib(peak[k][std::size_t(s)]));
      fmt::print("{:<16} {}\n", schedules[k].name, row);
    }
    std::string ratio;
    for (int s = 0; s < P; ++s) {
      const double r = peak[1][std::size_t(s)] / peak[0][std::size_t(s)];
      ratio += fmt::format("{:>12.3f}", r);
      ok = ok && r < 1.0;
    }
    fmt::print("{:<16} {}   (1F1B keeps p - s micro-batches, GPipe {}: (p-s)/m = {})\n", "1f1b / gpipe", ratio, m,
               [&] {
                 std::string f;
                 for (int s = 0; s < P; ++s) f += fmt::format("{}{:.3f}", s ? " " : "", double(P - s) / m);
                 return f;
               }());
    for (std::size_t k = 1; k < runs.size(); ++k)
      for (std::size_t i = 0; i < runs[k].losses.size(); ++i) {
        const double a = runs[k].losses[i], b = runs[0].losses[i];
        if (std::abs(a - b) > 1e-5 * std::abs(b)) {
          fmt::print("FAIL: {} step {} loss {} differs from gpipe's {}\n", schedules[k].name, i, a, b);
          ok = false;
        }
      }
  }

  if (P >= 4) {
    const int t = 2, p = P / t;
    const Run whole = run(mpi, *world, gpt(p, t), pipeline::ScheduleKind::one_f_one_b, 1, false);
    const Run split = run(mpi, *world, gpt(p, t), pipeline::ScheduleKind::one_f_one_b, 1, true);
    const std::vector<double> sent_whole = gather(*world, whole.pipeline_sent), sent_split = gather(*world, split.pipeline_sent);
    const std::vector<double> gathered = gather(*world, split.tensor_gathered - whole.tensor_gathered);
    if (main_rank) {
      double a = 0, b = 0, g = 0;
      for (int r = 0; r < P; ++r) a += sent_whole[std::size_t(r)], b += sent_split[std::size_t(r)], g += gathered[std::size_t(r)];
      const double activation = double(kMicro) * 128 * 256 * 4;  // one micro-batch's hidden state, fp32
      fmt::print("\n# 3. Bytes between stages per step, pipeline {} x 1D tensor {} (1F1B), all ranks together\n", p, t);
      fmt::print("{:<28} {:>14} {:>14}\n", "", "bytes", "per transfer");
      const double transfers = 2.0 * m * (p - 1) * t;  // activations and gradients, every tensor rank
      fmt::print("{:<28} {:>14.0f} {:>14.0f}   (hidden state B T C fp32 = {:.0f})\n", "whole activations", a,
                 a / transfers, activation);
      fmt::print("{:<28} {:>14.0f} {:>14.0f}   (1/t of it)\n", "scatter-gather", b, b / transfers);
      fmt::print("{:<28} {:>14.3f}\n", "ratio whole / scatter-gather", a / b);
      fmt::print("{:<28} {:>14.0f}   (inside each stage's tensor group, (t-1)/t of the hidden state each)\n",
                 "tensor all-gathers added", g);
      ok = ok && std::abs(a / b - t) < 0.01 * t;
      for (std::size_t i = 0; i < whole.losses.size(); ++i)
        if (std::abs(whole.losses[i] - split.losses[i]) > 1e-5 * std::abs(whole.losses[i])) {
          fmt::print("FAIL: scatter-gather changes the loss at step {}: {} vs {}\n", i, split.losses[i], whole.losses[i]);
          ok = false;
        }
    }
  }
  if (verify && main_rank) fmt::print("{}\n", ok ? "PASS" : "FAIL");
  const float status = gather(*world, main_rank && !ok ? 1.0 : 0.0)[0];
  return verify && status > 0 ? 1 : 0;
}
