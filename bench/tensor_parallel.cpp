// Tensor parallelism, measured against colossal-ai.txt. Run under mpirun with 4 or 8 ranks; every
// mode that fills the world with one tensor group is measured in the same run.
//
// 1. Communication of one linear layer Y = X W^T, X [b, s, h], W [h, h], forward + backward
//    (the mode's output_linear, its input split by the mode's split_features): the elements each rank sends (CountingCommunicator's ring-model
//    volume, summed over every group and rank), beside Table I's expression evaluated on the same
//    sizes (Sx = Sy = b s h, Sw = h h). Table I's units differ by mode: its 1D expression is the
//    all-ranks total of ring all-reduces (equal to ours); its 3D expression is one of the l
//    parallel groups' share (ours is l times it: every collective runs in l^2 groups of l).
//    Our 2D / 2.5D forward is Alg. 2's form (broadcast W down the column, reduce partial Y
//    along the row) and backward shares one broadcast of dY between dX and dW, so it moves
//    fewer elements than Table I's 3 broadcasts of X and W per step. With 8 ranks each advanced
//    mode runs twice: memory-lean (the default: 2.5D holds one depth slice of each weight block
//    and broadcasts the others' over the depth group when used; 3D takes the weight's row blocks
//    one at a time and gathers X again in backward) and with parallel.tensor.keep_gathered (whole
//    blocks in every depth layer; the gathered X kept): the difference is what the lean one adds.
// 2. The memory range test of Fig. 12: two linear layers (output_linear, input_linear, no bias)
//    on X [b, 16, h]; peak host bytes per rank (weights, gradients, activations and communication
//    buffers, from the allocator), sweeping the batch at a fixed hidden size and the hidden size
//    at a fixed batch up to 8192, with each mode's ratio to 1D.
//
//   mpirun -np 4 bench_tensor_parallel [--quick]
#include "config/options.h"
#include "nn/parallel_layers.h"
#include "nn/runner.h"
#include "parallel/context.h"
#include "comm/mpi_runtime.h"

#include <fmt/format.h>

#include <cstring>
#include <string>
#include <vector>

using namespace tidal;

namespace {

struct Mode {
  std::string name;
  int depth = 1;
  bool keep_gathered = false;  // parallel.tensor.keep_gathered: the traffic-lean variant
  std::string label() const {
    return (depth > 1 ? fmt::format("{} (d={})", name, depth) : name) + (keep_gathered ? " keep" : "");
  }
};

config::Config config_for(const Mode& m, int world, std::int64_t h) {
  config::Config cfg;
  cfg.model.n_embd = h;
  cfg.model.n_head = 8;
  cfg.model.vocab_size = 4096;
  cfg.train.batch_size = 64;
  cfg.parallel.tensor.size = world;
  cfg.parallel.tensor.mode = config::parse_choice<parallel::TensorMode>(m.name).value();
  cfg.parallel.tensor.depth = m.depth;
  cfg.parallel.tensor.keep_gathered = m.keep_gathered;
  return cfg;
}

// Runs `layers` forward and backward on x (this rank's block of the input) and returns the peak
// bytes of the host allocator.
std::size_t run(std::vector<nn::Module*> layers, const Tensor& x_block) {
  nn::Runner runner;
  nn::StepState state{.runner = &runner};
  nn::Context ctx(state);
  Tensor x = x_block;
  for (std::size_t i = 0; i < layers.size(); ++i) x = ctx.forward(*layers[i], x, i);
  Tensor dy = Tensor::full(x.shape(), 1e-3f);
  for (std::size_t i = layers.size(); i-- > 0;) dy = ctx.backward(*layers[i], dy, i);
  return host_allocator().peak_bytes();
}

// This rank's block of the replica's whole input, as the mode's output_linear takes it.
Tensor split_input(nn::LayerFactory& f, const Tensor& whole) {
  nn::Runner runner;
  nn::StepState state{.runner = &runner};
  nn::Context ctx(state);
  return ctx.forward(*f.split_features(), whole, 0);
}

double max_over(comm::Communicator& world, double v) {
  Tensor t = Tensor::full({1}, float(v));
  world.all_reduce(t, {.op = comm::ReduceOp::max})->wait();
  return t.item();
}
double sum_over(comm::Communicator& world, double v) {
  Tensor t = Tensor::full({1}, float(v));
  world.all_reduce(t)->wait();
  return t.item();
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  comm::MpiRuntime mpi(&argc, &argv);
  auto world = mpi.world(comm::Seconds(300));
  const int n = world->size();
  const bool main_rank = world->rank() == 0;
  std::vector<Mode> modes;
  if (n == 4) modes = {{"1d"}, {"2d"}, {"2.5d", 1}};
  // 8 ranks: the advanced modes memory-lean (the default) and keeping what they gathered.
  if (n == 8) modes = {{"1d"}, {"2.5d", 2}, {"3d"}, {"2.5d", 2, true}, {"3d", 1, true}};
  if (modes.empty()) {
    if (main_rank) fmt::print("bench_tensor_parallel: run with mpirun -np 4 or -np 8\n");
    return 2;
  }

  // 1. Communication volume of one linear.
  const std::int64_t b = 8, s = 16, h = 64;
  const double Sx = double(b * s * h), Sw = double(h * h), Sy = Sx;
  if (main_rank) {
    fmt::print("# Communication of one linear Y = X W^T, X [{}, {}, {}], W [{}, {}], forward + backward, {} ranks\n", b,
               s, h, h, h, n);
    fmt::print("{:<15} {:>16} {:>16} {:>22}  {}\n", "mode", "sent (all ranks)", "sent per rank", "Table I expression",
               "Table I value");
  }
  for (const Mode& m : modes) {
    config::Config cfg = config_for(m, n, h);
    parallel::ParallelContext pc(config::context_options(cfg), &mpi);
    auto f = nn::make_layers(pc, {.keep_gathered = m.keep_gathered});
    auto lin = f->output_linear(h, h, false, nn::ParameterInit::normal(0.02f));
    lin->assign_names("fc");
    for (nn::Parameter* p : lin->parameters()) nn::materialize(*p, 1, host_allocator());
    run({lin.get()}, split_input(*f, Tensor::full({b, s, h}, 0.5f)));
    double sent = 0;
    const nlohmann::json stats = pc.communication_stats();
    for (const auto& group : stats)
      for (const auto& op : group) sent += op["bytes_sent"].get<double>() / 4.0;
    const double all = sum_over(*world, sent);
    const int side = pc.layout().tensor_side();
    std::string expr;
    double paper = 0;
    if (m.name == "1d") expr = "2(p-1)Sx", paper = 2.0 * (n - 1) * Sx;
    if (m.name == "2d") expr = "3(q-1)(Sx+Sw)", paper = 3.0 * (side - 1) * (Sx + Sw);
    if (m.name == "2.5d") expr = "3(q-1)(Sx/d+Sw)", paper = 3.0 * (side - 1) * (Sx / m.depth + Sw);
    if (m.name == "3d") expr = "2(l-1)/l(Sx+Sw+Sy)", paper = 2.0 * (side - 1) / side * (Sx + Sw + Sy);
    if (main_rank)
      fmt::print("{:<15} {:>16.0f} {:>16.0f} {:>22}  {:.0f} ({:.2f}x of all ranks' total)\n", m.label(), all, all / n,
                 expr, paper, paper / all);
  }

  // 2. Memory range test: two linear layers.
  const std::vector<std::int64_t> batches = quick ? std::vector<std::int64_t>{64, 256} : std::vector<std::int64_t>{64, 128, 256, 512};
  const std::vector<std::int64_t> hiddens = quick ? std::vector<std::int64_t>{512, 1024} : std::vector<std::int64_t>{512, 1024, 2048, 4096, 8192};
  const std::int64_t fixed_h = 1024, fixed_b = 64, kSeq = 16;
  struct Point {
    std::int64_t batch, hidden;
  };
  std::vector<Point> points;
  for (std::int64_t bb : batches) points.push_back({bb, fixed_h});
  for (std::int64_t hh : hiddens) points.push_back({fixed_b, hh});
  if (main_rank) {
    fmt::print("\n# Memory range test (colossal-ai.txt Fig. 12): two linear layers on X [batch, {}, hidden], {} ranks; "
               "peak MiB per rank (max over ranks), ratio to 1D\n", kSeq, n);
    fmt::print("{:>6} {:>6}", "batch", "hidden");
    for (const Mode& m : modes) fmt::print(" {:>20}", m.label());
    fmt::print("\n");
  }
  for (const Point& pt : points) {
    std::vector<double> peaks;
    for (const Mode& m : modes) {
      config::Config cfg = config_for(m, n, pt.hidden);
      parallel::ParallelContext pc(config::context_options(cfg), &mpi);
      auto f = nn::make_layers(pc, {.keep_gathered = m.keep_gathered});
      const Tensor x = split_input(*f, Tensor::full({pt.batch, kSeq, pt.hidden}, 0.5f));
      host_allocator().reset_peak();
      const std::size_t before = host_allocator().current_bytes();
      auto l1 = f->output_linear(pt.hidden, pt.hidden, false, nn::ParameterInit::normal(0.02f));
      auto l2 = f->input_linear(pt.hidden, pt.hidden, false, nn::ParameterInit::normal(0.02f));
      l1->assign_names("l1");
      l2->assign_names("l2");
      for (nn::Parameter* p : l1->parameters()) nn::materialize(*p, 1, host_allocator());
      for (nn::Parameter* p : l2->parameters()) nn::materialize(*p, 1, host_allocator());
      const std::size_t peak = run({l1.get(), l2.get()}, x) - before;
      peaks.push_back(max_over(*world, double(peak)));
    }
    if (main_rank) {
      fmt::print("{:>6} {:>6}", pt.batch, pt.hidden);
      for (std::size_t i = 0; i < peaks.size(); ++i)
        fmt::print(" {:>11.2f} ({:+5.1f}%)", peaks[i] / 1048576.0, 100.0 * (peaks[i] / peaks[0] - 1.0));
      fmt::print("\n");
    }
  }
  if (main_rank)
    fmt::print("paper (Fig. 12, 8 GPUs): 2.5D -44%, 3D -65% vs 1D at batch 512; -62% / -74.2% at hidden 16384\n");
  return 0;
}
