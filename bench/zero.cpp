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
// 2. Bytes each rank sends per iteration in the data group (counting communicator: an
//    all-gather of n bytes sends (N-1)/N n, a reduce-scatter of n bytes (N-1)/N n, an all-reduce
//    2 (N-1)/N n), beside patrickstar-v2 sec. 6.2's stage-3 volume: two all-gathers and one
//    reduce-scatter of the fp16 param list, 3 (N-1)/N M elements = 6 (N-1)/N M bytes.
//
// --verify: exit 1 unless every stage's resident model data equals "ours" on S and its losses
// equal stage 0's within 1e-3 relative.
//
//   mpirun -np 4 bench_zero [--verify]
#include "comm/mpi_runtime.h"
#include "data/dataset.h"
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
  std::map<std::string, double> sent;  // per iteration, by collective
  std::vector<double> losses;
};

Result run(comm::MpiRuntime& mpi, int stage) {
  const config::Config cfg = gpt(mpi.world_size());
  parallel::ParallelContext pc(cfg, &mpi);
  comm::Communicator& group = pc.group(parallel::GroupKind::data);
  const int N = group.size(), rank = group.rank();
  auto model = models::make_model(cfg.model);
  model->materialize(7);
  HostAllocator param_memory(MemoryTier::device), optimizer_memory;
  memory::ChunkManager chunks(*model, model->parameters(),
                              {.chunk_elements = kChunk, .compute_dtype = DType::f16, .zero_stage = stage,
                               .group = &group},
                              param_memory,
                              optimizer_memory);
  auto dataset = data::make_dataset(cfg);
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
    for (const auto& [op, s] : stats["data"].items()) out.sent[op] = s["bytes_sent"].get<double>();
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
  for (int stage = 0; stage <= 3; ++stage) results.push_back(run(mpi, stage));
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
  if (main_rank) {
    fmt::print("\n## bytes sent per rank in one iteration (data group)\n");
    fmt::print("{:>5} | {:>14} | {:>14} | {:>14} | {:>14}\n", "stage", "all_gather", "reduce_scatter", "all_reduce",
               "total");
    for (int stage = 0; stage <= 3; ++stage) {
      const Result& r = results[std::size_t(stage)];
      auto get = [&](const char* op) { return r.sent.count(op) ? r.sent.at(op) : 0.0; };
      const double total = get("all_gather") + get("reduce_scatter") + get("all_reduce");
      fmt::print("{:>5} | {:>14} | {:>14} | {:>14} | {:>14}\n", stage, mib(get("all_gather")),
                 mib(get("reduce_scatter")), mib(get("all_reduce")), mib(total));
    }
    const Result& r3 = results[3];
    auto get = [&](const char* op) { return r3.sent.count(op) ? r3.sent.at(op) : 0.0; };
    const double measured = get("all_gather") + get("reduce_scatter");
    const double paper = 6 * (n - 1) / n * M, paper_s = 6 * (n - 1) / n * S;
    fmt::print("\nstage 3: measured {} per iteration; 6(N-1)/N x M bytes = {} (on S: {}); ratio measured / formula "
               "on S = {:.3f}\n",
               mib(measured), mib(paper), mib(paper_s), measured / paper_s);
    fmt::print("(each group is gathered once in forward and once in backward; the tied embedding's group is gathered "
               "again for the head in forward and then stays for the head's and the embedding's backward)\n");
    fmt::print("{}\n", ok ? "verify: ok" : "verify: FAILED");
  }
  if (verify && !ok) return 1;
  return 0;
}
