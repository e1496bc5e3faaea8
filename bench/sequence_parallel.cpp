// Sequence parallelism (ring self-attention, and Ulysses) against 1D tensor parallelism on the same ranks,
// measured on the BERT-Base shape as in colossal-ai.txt sec. V-C (12 layers, hidden 768, 12
// heads, vocabulary 30528 = BERT's 30522 padded to split 4 ways). Run under mpirun -np 4.
//
// 1. Communication per layer (blocks.0), forward and backward: the bytes each rank sends
//    (CountingCommunicator's ring-model volume over every group), beside the closed forms.
//    Ring: forward passes K and V blocks (N - 1 hops each), backward K, V, dK and dV:
//    2 (N - 1) and 4 (N - 1) blocks of B T/N C fp32. 1D (Megatron): two all-reduces of
//    B T C each way, 2 (p - 1)/p each. Ulysses: all-to-alls of qkv and y forward, of dY and dqkv
//    backward, each rank sending (N - 1)/N of its B T/N (3C + C).
// 2. Memory: model data (parameters, gradients, AdamW moments) and the peak of the activation
//    allocator over one forward + backward, per rank (max over ranks), measured at batch 1 and 2
//    and sequence 128, 256, 512. Activations are affine in the batch (their per-sample slope and
//    the batch-free rest are each fitted, exactly, as quadratics in the sequence length through
//    the three measured lengths), so the largest batch at sequence 512 and the largest sequence
//    at batch 64 under a per-rank cap follow (Fig. 15's tests). With --verify, a smaller cap that
//    the fit says admits exactly 3 samples is enforced on the activation allocator: batch 3 must
//    train and batch 4 must fail with an out-of-memory error.
//
// --selective runs every layout with train.activation_checkpointing = "selective" (each MLP's
// activation output let go after forward and remade in backward); --loss-chunks K runs the MLM
// head and the loss over K blocks of positions (train.loss_chunks: one block's logits at a time).
//
//   mpirun -np 4 bench_sequence_parallel [--cap-gib 40] [--verify] [--selective] [--loss-chunks K]
#include "comm/mpi_runtime.h"
#include "config/options.h"
#include "models/factory.h"
#include "nn/parallel_layers.h"
#include "nn/runner.h"
#include "nn/batch_slice.h"
#include "ops/ring_attention.h"
#include "ops/cross_entropy.h"
#include "optim/adamw.h"
#include "parallel/context.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

using namespace tidal;

namespace {

constexpr std::int64_t kVocab = 30528;

struct Layout {
  std::string name;
  int sequence = 1, tensor = 1;
  parallel::SequenceMode mode = parallel::SequenceMode::ring;
};

config::Config bert_base(const Layout& l, std::int64_t T, std::int64_t B) {
  config::Config cfg;
  config::ModelConfig& c = cfg.model;
  c.type = "bert";
  c.n_layer = 12;
  c.n_embd = 768;
  c.n_head = 12;
  c.vocab_size = kVocab;
  c.seq_len = T;
  c.dropout = 0.1f;
  cfg.train.batch_size = B;
  cfg.parallel.sequence = l.sequence;
  cfg.parallel.sequence_mode = l.mode;
  cfg.parallel.tensor.size = l.tensor;
  return cfg;
}

// MLM-style batch: random tokens, 15% of positions predicted, no padding.
nn::Batch make_batch(std::int64_t B, std::int64_t T) {
  nn::Batch b;
  b.tokens = Tensor::empty({B, T}, DType::i32);
  b.targets = Tensor::empty({B, T}, DType::i32);
  b.token_types = Tensor::zeros({B, T}, DType::i32);
  b.attn_mask = Tensor::empty({B, T}, DType::i32);
  for (std::int64_t i = 0; i < B * T; ++i) {
    b.tokens.data<std::int32_t>()[i] = std::int32_t((i * 7919) % kVocab);
    b.targets.data<std::int32_t>()[i] = i % 7 == 0 ? std::int32_t((i * 104729) % kVocab) : ops::kIgnoreIndex;
    b.attn_mask.data<std::int32_t>()[i] = 1;
  }
  return b;
}

double max_over(comm::Communicator& world, double v) {
  Tensor t = Tensor::full({1}, float(v));
  world.all_reduce(t, {.op = comm::ReduceOp::max})->wait();
  return t.item();
}

double bytes_sent(const parallel::ParallelContext& pc) {
  double sent = 0;
  for (const auto& group : pc.communication_stats())
    for (const auto& op : group) sent += op["bytes_sent"].get<double>();
  return sent;
}

// Bytes this rank sends during the forward and the backward of one module (by path).
class LayerTraffic final : public nn::ModuleHooks {
 public:
  LayerTraffic(const parallel::ParallelContext& pc, std::string path) : pc_(pc), path_(std::move(path)) {}
  void before_forward(nn::Module& m) override { if (m.path() == path_) start_ = bytes_sent(pc_); }
  void after_forward(nn::Module& m) override { if (m.path() == path_) forward_ = bytes_sent(pc_) - start_; }
  void before_backward(nn::Module& m) override { if (m.path() == path_) start_ = bytes_sent(pc_); }
  void after_backward(nn::Module& m) override { if (m.path() == path_) backward_ = bytes_sent(pc_) - start_; }
  double forward() const { return forward_; }
  double backward() const { return backward_; }

 private:
  const parallel::ParallelContext& pc_;
  std::string path_;
  double start_ = 0, forward_ = 0, backward_ = 0;
};

struct Measurement {
  double model = 0, activations = 0;  // bytes per rank, max over ranks
  double forward_sent = 0, backward_sent = 0;  // blocks.0, this rank
  bool out_of_memory = false;
};

bool selective = false;  // --selective
int loss_chunks = 1;     // --loss-chunks

// One forward + backward of BERT-Base at [B, T] under `l`; the activation allocator is capped
// at `activation_cap` bytes (0 = none).
Measurement measure(comm::MpiRuntime& mpi, comm::Communicator& world, const Layout& l, std::int64_t B,
                    std::int64_t T, std::size_t activation_cap = 0) {
  const config::Config cfg = bert_base(l, T, B);
  parallel::ParallelContext pc(config::context_options(cfg), &mpi);
  const std::size_t before = host_allocator().current_bytes();
  Measurement out;
  {
    const auto layers = nn::make_layers(pc);
    auto model = models::make_model(cfg.model, {.selective = selective, .loss_chunks = loss_chunks}, *layers);
    model->materialize(1);
    optim::AdamW adam(model->parameters(), {});
    out.model = max_over(world, double(host_allocator().current_bytes() - before));
    HostAllocator activations;
    if (activation_cap) activations.set_capacity(activation_cap);
    const nn::Batch batch = make_batch(B, T);
    nn::Runner runner;
    LayerTraffic traffic(pc, "blocks.0");
    runner.add_hooks(&traffic);
    nn::StepState state{.runner = &runner, .training = true, .seed = 1, .batch = &batch, .activations = &activations};
    bool oom = false;
    try {
      nn::Context ctx(state);
      model->run_forward(ctx);
      model->run_backward(ctx);
    } catch (const OutOfMemory&) {
      oom = true;  // the other ranks may be waiting on this one: every rank stops at its own cap
    }
    out.out_of_memory = max_over(world, oom ? 1.0 : 0.0) > 0;
    out.activations = max_over(world, double(activations.peak_bytes()));
    out.forward_sent = traffic.forward();
    out.backward_sent = traffic.backward();
  }
  return out;
}

// Seconds of attention compute (forward + backward, the best of `repeats`) of ring place `place`
// of N in a causal ring over [B, T] with GPT-2's heads (12 x 64), its positions contiguous or
// zig-zag: the blocks of every place as the ring would bring them, without the ring's waits, so
// one process times each place's own work.
double place_attention_seconds(int N, int place, bool zigzag, std::int64_t B, std::int64_t T, int repeats) {
  const int H = 12;
  const std::int64_t hd = 64, C = H * hd, local = T / N;
  const nn::BatchSlice positions{.position_parts = N, .position_index = place, .zigzag = zigzag};
  const auto fill = [](Tensor t, std::uint64_t seed) {
    for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = float((i * 7919 + seed * 104729) % 1000) / 1000.0f - 0.5f;
    return t;
  };
  const Tensor q = fill(Tensor::empty({B, local, C}), 1), dy = fill(Tensor::empty({B, local, C}), 2);
  std::vector<Tensor> blocks;
  for (int o = 0; o < N; ++o) blocks.push_back(fill(Tensor::empty({B, local, 2 * C}), 3 + o));
  const auto rows = [](const Tensor& t, const nn::PositionRun& r) { return t.slice(1, r.local, r.local + r.length); };
  const auto stats = [](const Tensor& t, const nn::PositionRun& r) { return t.slice(2, r.local, r.local + r.length); };
  double best = 1e30;
  for (int rep = 0; rep < repeats; ++rep) {
    Tensor y = Tensor::zeros({B, local, C}), lse = Tensor::full({B, H, local}, -INFINITY), sum = Tensor::zeros(lse.shape());
    Tensor dq = Tensor::zeros(q.shape()), dkv = Tensor::zeros(blocks[0].shape());
    const std::vector<nn::PositionRun> mine = positions.position_runs(local);
    const auto start = std::chrono::steady_clock::now();
    for (int o = 0; o < N; ++o)  // forward: every block, as the ring brings them
      for (const nn::PositionRun& theirs : positions.at_place(o).position_runs(local))
        for (const nn::PositionRun& run : mine) {
          Tensor y_run = rows(y, run), lse_run = stats(lse, run), sum_run = stats(sum, run);
          ops::ring_attention_forward(y_run, lse_run, sum_run, rows(q, run), rows(blocks[o], theirs), theirs.global,
                                      {.n_head = H, .causal = true, .first_query = run.global});
        }
    for (const nn::PositionRun& run : mine) {
      Tensor y_run = rows(y, run), lse_run = stats(lse, run);
      ops::ring_attention_finish(y_run, lse_run, stats(sum, run), {.n_head = H});
    }
    for (int o = 0; o < N; ++o)  // backward: every block again
      for (const nn::PositionRun& theirs : positions.at_place(o).position_runs(local))
        for (const nn::PositionRun& run : mine) {
          Tensor dq_run = rows(dq, run), dkv_run = rows(dkv, theirs);
          ops::ring_attention_backward(dq_run, dkv_run, rows(q, run), rows(blocks[o], theirs), rows(y, run),
                                       rows(dy, run), stats(lse, run), theirs.global,
                                       {.n_head = H, .causal = true, .first_query = run.global});
        }
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

// The quadratic a T^2 + b T + c through three points (T_i, y_i).
struct Quadratic {
  double a = 0, b = 0, c = 0;
  double operator()(double T) const { return (a * T + b) * T + c; }
  static Quadratic through(const double (&T)[3], const double (&y)[3]) {
    // Newton's divided differences.
    const double d01 = (y[1] - y[0]) / (T[1] - T[0]), d12 = (y[2] - y[1]) / (T[2] - T[1]);
    const double a = (d12 - d01) / (T[2] - T[0]);
    const double b = d01 - a * (T[0] + T[1]);
    return {a, b, y[0] - a * T[0] * T[0] - b * T[0]};
  }
};

std::string mib(double bytes) { return fmt::format("{:.1f} MiB", bytes / double(1ull << 20)); }

}  // namespace

int main(int argc, char** argv) {
  double cap_gib = 40;
  bool verify = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--cap-gib") == 0 && i + 1 < argc) cap_gib = std::atof(argv[++i]);
    if (std::strcmp(argv[i], "--verify") == 0) verify = true;
    if (std::strcmp(argv[i], "--selective") == 0) selective = true;
    if (std::strcmp(argv[i], "--loss-chunks") == 0 && i + 1 < argc) loss_chunks = std::max(1, std::atoi(argv[++i]));
  }
  comm::MpiRuntime mpi(&argc, &argv);
  auto world = mpi.world(comm::Seconds(1800));
  const int n = world->size();
  const bool main_rank = world->rank() == 0;
  if (n != 4) {
    if (main_rank) fmt::print("bench_sequence_parallel: run with mpirun -np 4\n");
    return 2;
  }
  const std::vector<Layout> layouts = {
      {"sequence=4", 4, 1}, {"1D tensor=4", 1, 4}, {"ulysses=4", 4, 1, parallel::SequenceMode::ulysses}};
  const double cap = cap_gib * double(1ull << 30);
  const double lengths[3] = {128, 256, 512};
  if (main_rank)
    fmt::print("# BERT-Base shape (12 layers, hidden 768, 12 heads, vocabulary {}), fp32 with AdamW, {} ranks, "
               "train.activation_checkpointing = \"{}\", train.loss_chunks = {}\n",
               kVocab, n, selective ? "selective" : "none", loss_chunks);

  struct Fit {
    Quadratic per_sample, rest;  // activation bytes = B * per_sample(T) + rest(T)
    double model512 = 0, model_slope = 0;  // model bytes at T = 512, and per position (position table)
    Measurement at512;
  };
  std::vector<Fit> fits;
  for (const Layout& l : layouts) {
    Fit f;
    double one[3], two[3], model[3];
    for (int i = 0; i < 3; ++i) {
      const Measurement m1 = measure(mpi, *world, l, 1, std::int64_t(lengths[i]));
      const Measurement m2 = measure(mpi, *world, l, 2, std::int64_t(lengths[i]));
      one[i] = m1.activations;
      two[i] = m2.activations;
      model[i] = m1.model;
      if (i == 2) f.at512 = m1;
    }
    double slope[3], rest[3];
    for (int i = 0; i < 3; ++i) slope[i] = two[i] - one[i], rest[i] = one[i] - slope[i];
    f.per_sample = Quadratic::through(lengths, slope);
    f.rest = Quadratic::through(lengths, rest);
    f.model512 = model[2];
    f.model_slope = (model[2] - model[0]) / (lengths[2] - lengths[0]);
    fits.push_back(f);
    if (main_rank) {
      fmt::print("{:<12} model data {} per rank; activations per sample at T = 128 / 256 / 512: {} / {} / {} "
                 "(+ {} per batch)\n",
                 l.name, mib(f.model512), mib(slope[0]), mib(slope[1]), mib(slope[2]), mib(rest[2]));
    }
  }

  if (main_rank) {
    const Fit &s = fits[0], &t = fits[1], &u = fits[2];
    const double block = 1.0 * 512 / n * 768 * 4;  // B T/N C fp32 at B = 1
    const double tp = 2.0 * (n - 1) / n * 512 * 768 * 4;  // one all-reduce of B T C
    fmt::print("\n# Bytes sent per rank by one layer (blocks.0), batch 1, sequence 512\n");
    fmt::print("{:<12} {:>12} {:>12} {:>12} {:>12}  {}\n", "layout", "forward", "formula", "backward", "formula",
               "formula");
    fmt::print("{:<12} {:>12.0f} {:>12.0f} {:>12.0f} {:>12.0f}  ring: 2(N-1) and 4(N-1) blocks of B T/N C\n",
               layouts[0].name, s.at512.forward_sent, 2.0 * (n - 1) * block, s.at512.backward_sent, 4.0 * (n - 1) * block);
    fmt::print("{:<12} {:>12.0f} {:>12.0f} {:>12.0f} {:>12.0f}  1D: 2 all-reduces of B T C, 2(p-1)/p each\n",
               layouts[1].name, t.at512.forward_sent, 2 * tp, t.at512.backward_sent, 2 * tp);
    const double a2a = (n - 1.0) / n * 512 / n * (3 * 768 + 768) * 4;  // qkv and y (dY and dqkv) of B T/N
    fmt::print("{:<12} {:>12.0f} {:>12.0f} {:>12.0f} {:>12.0f}  Ulysses: all-to-alls of qkv and y, (N-1)/N of B T/N "
               "(3C + C) each way\n",
               layouts[2].name, u.at512.forward_sent, a2a, u.at512.backward_sent, a2a);

    fmt::print("\n# Peak activation bytes per rank, batch 1, sequence 512 (measured)\n");
    fmt::print("{:<12} {:>14} {:>14}\n", "layout", "activations", "model data");
    for (std::size_t i = 0; i < layouts.size(); ++i)
      fmt::print("{:<12} {:>14} {:>14}\n", layouts[i].name, mib(fits[i].at512.activations), mib(fits[i].model512));
    fmt::print("sequence=4 / 1D tensor=4 activations: {:.2f}x; ulysses=4 / 1D tensor=4: {:.2f}x\n",
               s.at512.activations / t.at512.activations, u.at512.activations / t.at512.activations);

    // Fig. 15 under the cap: the largest batch at T = 512 and the largest T (a multiple of 4) at B = 64.
    std::vector<std::int64_t> max_batch, max_seq;
    for (const Fit& f : fits) {
      max_batch.push_back(std::int64_t(std::floor((cap - f.model512 - f.rest(512)) / f.per_sample(512))));
      std::int64_t T = 4;
      auto fits_at = [&](double len) {
        return f.model512 + f.model_slope * (len - 512) + f.rest(len) + 64 * f.per_sample(len) <= cap;
      };
      while (fits_at(double(T + 4))) T += 4;
      max_seq.push_back(fits_at(double(T)) ? T : 0);
    }
    fmt::print("\n# Largest batch (sequence 512) and largest sequence (batch 64) under {:.0f} GiB per rank, from the "
               "fits\n",
               cap_gib);
    fmt::print("{:<12} {:>10} {:>10}\n", "layout", "batch", "sequence");
    for (std::size_t i = 0; i < layouts.size(); ++i)
      fmt::print("{:<12} {:>10} {:>10}\n", layouts[i].name, max_batch[i], max_seq[i]);
    fmt::print("sequence / 1D: batch {:.2f}x, sequence length {:.2f}x   (paper, Fig. 15, 12 GPUs: 4.44x and 1.18x)\n",
               double(max_batch[0]) / double(max_batch[1]), double(max_seq[0]) / double(max_seq[1]));
    fmt::print("ulysses / 1D:  batch {:.2f}x, sequence length {:.2f}x\n", double(max_batch[2]) / double(max_batch[1]),
               double(max_seq[2]) / double(max_seq[1]));
  }

  if (main_rank) {
    // Causal work per place of the ring: each place's attention compute, timed in this process
    // alone (no ring waits, no other rank sharing the cores). A contiguous ring's last place
    // attends N times the keys of its first; zig-zag gives every place the same number.
    const std::int64_t B = 1, T = 4096;
    fmt::print("\n# Causal ring attention (GPT-2 heads 12 x 64), batch {}, sequence {}, {} places: seconds of "
               "forward + backward compute per place\n", B, T, n);
    for (const bool zigzag : {false, true}) {
      // Rounds over the places, each place's fastest kept: the other ranks wait at a barrier that
      // may spin on these shared cores, and whatever that takes falls on every place alike.
      std::vector<double> best(std::size_t(n), 1e30);
      for (int round = 0; round < 5; ++round)
        for (int r = 0; r < n; ++r)
          best[std::size_t(r)] = std::min(best[std::size_t(r)], place_attention_seconds(n, r, zigzag, B, T, 1));
      double lo = 1e30, hi = 0;
      std::string per_place;
      for (const double t : best) {
        lo = std::min(lo, t);
        hi = std::max(hi, t);
        per_place += fmt::format(" {:.3f}", t);
      }
      fmt::print("{:<11}:{}   slowest / fastest {:.2f}x\n", zigzag ? "zig-zag" : "contiguous", per_place, hi / lo);
    }
  }
  world->barrier()->wait();

  if (verify) {
    for (std::size_t i = 0; i < layouts.size(); ++i) {
      const Fit& f = fits[i];
      // Room for 3.5 samples: 3 must fit and 4 must not.
      const auto activation_cap = std::size_t(f.rest(512) + 3.5 * f.per_sample(512));
      const Measurement three = measure(mpi, *world, layouts[i], 3, 512, activation_cap);
      const Measurement four = measure(mpi, *world, layouts[i], 4, 512, activation_cap);
      if (main_rank)
        fmt::print("verify {:<12}: activation cap {}: batch 3 {} (peak {}, predicted {}), batch 4 {}\n",
                   layouts[i].name, mib(double(activation_cap)), three.out_of_memory ? "FAILED" : "trains",
                   mib(three.activations), mib(f.rest(512) + 3 * f.per_sample(512)),
                   four.out_of_memory ? "runs out of memory" : "TRAINS (fit wrong)");
    }
  }
  return 0;
}
