// ZeRO on chunks (memory/chunk_manager.h), measured on a GPT (12 layers, width 256, 8 heads,
// sequence 128, vocabulary 512) in fp16 mixed precision over the N launched ranks (parallel.data
// = N), two sequences per rank and step, at zero.stage 0-3:
//
// 1. Model-data bytes per rank from the allocators (the param list's and the optimizer's) beside
//    the formulas for M parameters (patrickstar-v2 sec. 6, DeepSpeed's ZeRO): stage 0 16M (14M
//    with the gradient in the param chunk), 1: 4M + 12M/N, 2: 2M + 14M/N, 3: 14M/N + the groups
//    in flight. Gradients reuse the param list at every stage here, so the gradient's 2M (stage 1)
//    or 2M/N (stage 2) is not spent: the column "ours" is the formula less it, evaluated on the
//    chunk space S (M plus padding), which the measurement must equal exactly; the peak of the
//    param allocator adds the gathered group and the gradient buffers in flight.
// 2. Communication per iteration in the data group: the link bytes of the counting communicator
//    (the bandwidth term of the cost model patrickstar-v1 sec. 6.2 uses: an all-gather or a
//    reduce-scatter of n bytes (N-1)/N n, an all-reduce 2 (N-1)/N n, a broadcast 2 (N-1)/N n,
//    a scatter and then an all-gather), beside the stage-3 volumes of patrickstar-v1 sec. 6.2:
//    PatrickStar's two all-gathers and one reduce-scatter of the fp16 param list, 6 (N-1)/N M
//    bytes, and the broadcast-based baseline of ZeRO-DP (zero.fetch = "broadcast": each chunk
//    broadcast from its owner, in forward and again in backward), 10 (N-1)/N M bytes. Both run.
//
// --verify: exit 1 unless every stage's resident model data equals "ours" on S, its losses
// equal stage 0's within 1e-3 relative, the broadcast baseline's losses equal stage 3's, the
// two stage-3 volumes equal their formulas on S, and stage 1 moves what stage 0 moves (its
// gradients reduce-scattered, its params all-gathered: an all-reduce's two halves).
//
//   mpirun -np 4 bench_zero [--verify]
#include "comm/mpi_runtime.h"
#include "config/options.h"
#include "data/data_options.h"
#include "memory/chunk_manager.h"
#include "models/factory.h"
#include "nn/runner.h"
#include "parallel/context.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

using namespace tidal;

namespace {

constexpr int kPerRank = 2, kSteps = 3;
// Five communication groups of 4 chunks (24.5% padding at N = 4), so that stage 3 holds one
// gathered group at a time, not the model. (The smallest padding, 1 group, would gather it all.)
constexpr std::int64_t kChunk = 600000;

config::Config gpt(int ranks) {
  config::Config cfg;
  config::ModelConfig& c = cfg.model;
  c.type = "gpt";
  c.n_layer = 12;
  c.n_embd = 256;
  c.n_head = 8;
  c.seq_len = 128;
  c.vocab_size = 512;
  c.dropout = 0.0;
  cfg.parallel.data = ranks;
  cfg.train.batch_size = kPerRank * ranks;
  return cfg;
}

struct Result {
  double M = 0, S = 0;  // parameters, chunk space (elements)
  double resident = 0;  // model data bytes between steps (allocators' current)
  double param_peak = 0, optimizer_bytes = 0;
  std::map<std::string, double> link;  // link bytes per iteration, by collective
  double seconds = 0;                  // in the collectives, that iteration
  std::vector<double> losses;
};

Result run(comm::MpiRuntime& mpi, int stage, memory::ChunkFetch fetch) {
  const config::Config cfg = gpt(mpi.world_size());
  parallel::ParallelContext pc(config::context_options(cfg), &mpi);
  comm::Communicator& group = pc.group(parallel::GroupKind::data);
  const int N = group.size(), rank = group.rank();
  auto model = models::make_model(cfg.model);
  model->materialize(7);
  HostAllocator param_memory(MemoryTier::device), optimizer_memory;
  memory::ChunkManager chunks(*model, model->parameters(),
                              {.chunk_elements = kChunk,
                               .compute_dtype = DType::f16,
                               .zero_stage = stage,
                               .group = &group,
                               .fetch = fetch},
                              param_memory,
                              optimizer_memory);
  auto dataset = data::make_dataset(config::data_options(cfg));
  nn::Runner runner;
  runner.add_hooks(&chunks);
  const ops::AdamWOptions adam{.lr = 1e-3f, .grad_scale = 1024.0f};
  Result out;
  out.M = double(model->num_parameters());
  out.S = double(chunks.layout().chunks) * double(chunks.layout().chunk_elements);
  for (int step = 0; step < kSteps; ++step) {
    if (step == kSteps - 1) {
      pc.reset_communication_stats();
      param_memory.reset_peak();
    }
    const nn::Batch batch = dataset->batch(std::int64_t(step * N + rank) * kPerRank, kPerRank, data::Split::train);
    nn::StepState state{.runner = &runner, .training = true, .seed = 7, .step = std::uint32_t(step), .batch = &batch};
    nn::Context ctx(state);
    Tensor loss = Tensor::full({1}, model->run_forward(ctx).loss / float(N));
    chunks.end_forward();
    model->run_backward(ctx, 1024.0f / float(N));  // a fixed fp16 loss scale, divided out by the update
    chunks.end_backward();
    chunks.adamw_step(adam, step + 1);
    group.all_reduce(loss)->wait();
    out.losses.push_back(double(loss.item()));
  }
  out.resident = double(param_memory.current_bytes() + optimizer_memory.current_bytes());
  out.param_peak = double(param_memory.peak_bytes());
  out.optimizer_bytes = double(optimizer_memory.current_bytes());
  const nlohmann::json stats = pc.communication_stats();
  if (stats.contains("data"))
    for (const auto& [op, s] : stats["data"].items()) {
      out.link[op] = s["link_bytes"].get<double>();
      out.seconds += s["seconds"].get<double>();
    }
  return out;
}

std::string mib(double bytes) { return fmt::format("{:.3f} MiB", bytes / double(1ull << 20)); }

}  // namespace

int main(int argc, char** argv) {
  bool verify = false;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--verify") == 0) verify = true;
  comm::MpiRuntime mpi(&argc, &argv);
  const int N = mpi.world_size();
  const bool main_rank = mpi.world_rank() == 0;
  bool ok = true;
  std::vector<Result> results;
  for (int stage = 0; stage <= 3; ++stage) results.push_back(run(mpi, stage, memory::ChunkFetch::all_gather));
  const Result baseline = run(mpi, 3, memory::ChunkFetch::broadcast);
  if (baseline.losses != results[3].losses) ok = false;
  const double M = results[0].M, S = results[0].S, n = N;
  if (main_rank) {
    fmt::print("# GPT 12 layers, width 256, 8 heads, sequence 128, vocabulary 512: M = {:.0f} parameters in chunks of "
               "{} elements, S = {:.0f} in all (padding {:.1f}%); fp16 params, fp32 master/momentum/variance; N = {} data ranks, "
               "{} sequences per rank\n",
               M, kChunk, S, 100 * (S / M - 1), N, kPerRank);
    fmt::print("\n## model data per rank (bytes, resident between steps; peak adds what is in flight)\n");
    fmt::print("{:>5} | {:>22} | {:>14} | {:>16} | {:>14} | {:>14}\n", "stage", "formula (M)", "formula", "ours (on S)",
               "measured", "param peak");
  }
  const char* formulas[] = {"16M (14M, grad reuse)", "4M + 12M/N", "2M + 14M/N", "14M/N + in flight"};
  for (int stage = 0; stage <= 3; ++stage) {
    const Result& r = results[std::size_t(stage)];
    const double formula[] = {16 * M, 4 * M + 12 * M / n, 2 * M + 14 * M / n, 14 * M / n};
    const double ours[] = {14 * S, 2 * S + 12 * S / n, 2 * S + 12 * S / n, 14 * S / n};
    if (main_rank)
      fmt::print("{:>5} | {:>22} | {:>14} | {:>16} | {:>14} | {:>14}\n", stage, formulas[stage],
                 mib(formula[stage]), mib(ours[stage]), mib(r.resident), mib(r.param_peak));
    if (r.resident != ours[stage]) ok = false;
    for (std::size_t s = 0; s < r.losses.size(); ++s)
      if (std::abs(r.losses[s] - results[0].losses[s]) > 1e-3 * std::abs(results[0].losses[s])) ok = false;
  }
  auto get = [](const Result& r, const char* op) { return r.link.count(op) ? r.link.at(op) : 0.0; };
  auto total = [&](const Result& r) {
    return get(r, "all_gather") + get(r, "broadcast") + get(r, "reduce_scatter") + get(r, "all_reduce");
  };
  // Stage 3's model data traffic (the loss's all-reduce aside): the seed's volumes.
  auto chunks = [&](const Result& r) { return get(r, "all_gather") + get(r, "broadcast") + get(r, "reduce_scatter"); };
  const double agather = 6 * (n - 1) / n, broadcast = 10 * (n - 1) / n;
  // Sums of many per-collective terms: equal up to the last bits.
  auto equal = [](double a, double b) { return std::abs(a - b) <= 1e-12 * b; };
  if (!equal(chunks(results[3]), agather * S) || !equal(chunks(baseline), broadcast * S)) ok = false;
  // Stage 1 reduce-scatters the gradients (each rank updates what it owns) and gathers the
  // updated params: plain data parallelism's all-reduce, split in its two halves.
  if (!equal(total(results[1]), total(results[0]))) ok = false;
  if (main_rank) {
    fmt::print("\n## communication per iteration (data group): link bytes, the cost model's bandwidth term\n");
    fmt::print("{:>15} | {:>12} | {:>12} | {:>14} | {:>12} | {:>12} | {:>9}\n", "stage", "all_gather", "broadcast",
               "reduce_scatter", "all_reduce", "total", "comm s");
    auto row = [&](const std::string& name, const Result& r) {
      fmt::print("{:>15} | {:>12} | {:>12} | {:>14} | {:>12} | {:>12} | {:>9.3f}\n", name, mib(get(r, "all_gather")),
                 mib(get(r, "broadcast")), mib(get(r, "reduce_scatter")), mib(get(r, "all_reduce")), mib(total(r)),
                 r.seconds);
    };
    for (int stage = 0; stage <= 3; ++stage) row(std::to_string(stage), results[std::size_t(stage)]);
    row("3, broadcast", baseline);
    fmt::print("\nstage 3, all-gather (PatrickStar): {} per iteration; 6(N-1)/N x M bytes = {} (on S: {}); measured / "
               "formula on S = {:.3f}\n",
               mib(chunks(results[3])), mib(agather * M), mib(agather * S), chunks(results[3]) / (agather * S));
    fmt::print("stage 3, broadcast (ZeRO-DP baseline): {} per iteration; 10(N-1)/N x M bytes = {} (on S: {}); measured "
               "/ formula on S = {:.3f}\n",
               mib(chunks(baseline)), mib(broadcast * M), mib(broadcast * S), chunks(baseline) / (broadcast * S));
    fmt::print("stage 1: {} per iteration, stage 0 (plain data parallelism): {}; stage 1 / stage 0 = {:.3f}\n",
               mib(total(results[1])), mib(total(results[0])), total(results[1]) / total(results[0]));
    fmt::print("broadcast / all-gather = {:.3f} (the seed: 5/3 = 1.667); losses of the two {}\n",
               chunks(baseline) / chunks(results[3]), baseline.losses == results[3].losses ? "identical" : "DIFFER");
    fmt::print("(each group is gathered once in forward and once in backward; the tied embedding's group is gathered "
               "again for the head in forward and then stays for the head's and the embedding's backward; comm s is "
               "the time in collectives, ranks oversubscribed on this machine's cores)\n");
    fmt::print("{}\n", ok ? "verify: ok" : "verify: FAILED");
  }
  if (verify && !ok) return 1;
  return 0;
}
