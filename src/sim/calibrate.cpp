#include "sim/calibrate.h"

#include "core/error.h"
#include "io/atomic_file.h"
#include "ops/cast.h"
#include "ops/cpu/onednn_matmul.h"
#include "ops/attention.h"
#include "ops/gelu.h"
#include "ops/gemm.h"
#include "ops/layernorm.h"
#include "ops/optimizer_step.h"
#include "ops/residual.h"

#include <fmt/format.h>
#include <fcntl.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <thread>
#include <vector>

namespace tidal::sim {
namespace {

using Clock = std::chrono::steady_clock;

// Evicts this core's caches: a pass over 64 MiB, far more than a core's own caches hold. In a
// step an op's operands were written or last read several ops ago, so they come from memory or
// a far cache; an op timed over and over on operands left in cache runs faster than any op in a
// step does (measured here: the products of a width-256 layer at 165 GFLOP/s in a loop, 135 after
// such a pass, 129 in training, 2 ranks on 2 cores).
void evict_caches() {
  static std::vector<float> junk(std::size_t(16) << 20, 0.0f);
  for (float& x : junk) x += 1.0f;
}

// The median of `repeats` runs of f, in seconds (after one untimed run), `before` run ahead of
// each. The median, not the fastest: training steps on shared cores are timed by their median
// (bench/cost_model_time.py), and the rates that predict them should be the ones a typical op
// sees, not the luckiest.
template <class Before, class F>
double median_time(int repeats, Before&& before, F&& f) {
  f();
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    before();
    const auto t0 = Clock::now();
    f();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::nth_element(times.begin(), times.begin() + repeats / 2, times.end());
  return times[std::size_t(repeats / 2)];
}

// An op's time: each run on cold caches. The ranks are not in lockstep: one rank's op runs beside
// the others' evictions and ops, as in a step a rank's GEMM runs beside the other ranks'
// memory-bound ops.
template <class F>
double op_time(int repeats, F&& f) {
  return median_time(repeats, evict_caches, f);
}

// A transfer's time: each run on what the last left (ranks 0 and 1 time each other's sends).
template <class F>
double transfer_time(int repeats, F&& f) {
  return median_time(repeats, [] {}, f);
}

// The timing ranks' mean time of an op, as a rate, the same on every rank (`mine`: this rank's
// rate, 0 where it does not time). The mean, not the slowest rank's: a step sums many ops, and a
// rank slow at one op is not slow at all of them (measured on 2 cores, one product per core at
// once: each size 10-15% apart between the cores, neither core the slower throughout). The
// slowest rank's figure made every op slow: 2-rank steps predicted about 10% long.
double mean_of_ranks(comm::Communicator& world, double mine, int computing) {
  Tensor v = Tensor::full({1}, mine > 0 ? float(1.0 / mine) : 0.0f);
  world.all_reduce(v)->wait();
  return double(computing) / double(v.item());
}

// Who times the ops. Where the ranks' threads outnumber the cores (mpirun --oversubscribe), a rank
// timing an op beside all the others sees it shared or not, by whether it ends inside a scheduler
// slice (8 ranks on 2 cores, measured: a 256^3 GEMM at 0.10 TFLOP/s, a 512^3 one at 0.024), while
// in a step every op shares the cores. So only as many ranks as the cores hold time the ops, the
// others waiting (their cores given up, as in a collective), and the rate a rank sees with every
// rank computing is theirs over the oversubscription: the cores shared by all. The cost model
// speeds a rank up where fewer compute (processor sharing, sim/hardware.h).
struct Sharing {
  int computing = 1;            // ranks 0 .. computing - 1 time the ops
  double oversubscription = 1;  // the ranks' threads per core (1: a core per thread or more)
};

Sharing sharing_of(int ranks) {
  const int cores = std::max(1, int(std::thread::hardware_concurrency()));
  const int threads = std::max(1, omp_get_max_threads());
  return {.computing = std::clamp(cores / threads, 1, ranks),
          .oversubscription = std::max(1.0, double(ranks) * threads / cores)};
}

// An op's rate as each rank sees it with every rank computing: the timing ranks' mean time.
template <class F>
double op_rate(comm::Communicator& world, const Sharing& sharing, F&& rate) {
  const double mine = world.rank() < sharing.computing ? rate() : 0.0;
  return mean_of_ranks(world, mine, sharing.computing) / sharing.oversubscription;
}

// A tensor of `dtype` holding `value` everywhere (an op's operand).
Tensor filled(const Shape& shape, float value, DType dtype) {
  Tensor t = Tensor::full(shape, value);
  if (dtype == DType::f32) return t;
  Tensor narrow = Tensor::empty(shape, dtype);
  ops::cast(narrow, t);
  return narrow;
}

double gemm_rate(DType dtype, std::int64_t n, int repeats) {
  const Tensor a = filled({n, n}, 0.5f, dtype), b = filled({n, n}, 0.25f, dtype);
  Tensor c = Tensor::empty({n, n}, dtype);
  return 2.0 * double(n) * double(n) * double(n) / op_time(repeats, [&] { ops::gemm(c, a, b); });
}

// Attention's forward and backward (tidal's kernels) on qkv [b, t, 3 c], causal, `heads` heads:
// FLOP/s, counting the forward's two products and the backward's five over the scores the
// kernels compute (ops::cpu::causal_work_share: half the keys and half a block's diagonal), so
// that the rate holds without the mask too.
double attention_rate(DType dtype, std::int64_t b, std::int64_t t, std::int64_t c, int heads, int repeats) {
  const Tensor qkv = filled({b, t, 3 * c}, 0.01f, dtype), dy = filled({b, t, c}, 0.01f, dtype);
  Tensor y = Tensor::empty({b, t, c}, dtype), lse = Tensor::empty({b, heads, t}), dqkv = Tensor::empty(qkv.shape(), dtype);
  const ops::AttentionOptions opt{.n_head = heads, .n_kv_head = heads, .causal = true, .key_mask = nullptr};
  const double seconds = op_time(repeats, [&] {
    ops::attention_forward(y, lse, qkv, opt);
    ops::attention_backward(dqkv, dy, qkv, y, lse, opt);
  });
  return 3.5 * 4.0 * double(b) * double(t) * double(t) * double(c) * ops::cpu::causal_work_share(t) / seconds;
}

// Elementwise ops as a layer runs them on [rows, c] of `dtype` (LayerNorm, GELU and a residual
// add, each forward and backward): the bytes of the tensors they make, written once and read once,
// per second (the cost model counts every tensor a step makes so). Per byte, bf16 runs slower than
// fp32 (measured here: 3.6 GB/s against 8-10; the kernels widen each element to fp32 and back).
double elementwise_rate(DType dtype, std::int64_t rows, std::int64_t c, int repeats) {
  const Tensor x = filled({rows, c}, 0.5f, dtype), dy = filled({rows, c}, 0.1f, dtype);
  const Tensor w = filled({c}, 1.0f, dtype), bias = filled({c}, 0.0f, dtype);
  Tensor y = Tensor::empty({rows, c}, dtype), dx = Tensor::empty({rows, c}, dtype);
  Tensor mean = Tensor::empty({rows}), rstd = Tensor::empty({rows});
  Tensor dw = filled({c}, 0.0f, dtype), db = filled({c}, 0.0f, dtype);
  const double seconds = op_time(repeats, [&] {
    ops::layernorm_forward(y, mean, rstd, x, w, bias, 1e-5f);
    ops::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd);
    ops::gelu_forward(y, x, ops::GeluForm::tanh);
    ops::gelu_backward(dx, dy, x, ops::GeluForm::tanh);
    ops::residual_add(y, x, dy);
  });
  return 2.0 * 5.0 * double(rows * c) * double(dtype_size(dtype)) / seconds;
}

// AdamW over n fp32 parameters: its 28 bytes a parameter (4 read and 3 written) per second.
double optimizer_rate(std::int64_t n, int repeats) {
  Tensor p = Tensor::full({n}, 0.5f), g = Tensor::full({n}, 0.01f), m = Tensor::zeros({n}), v = Tensor::zeros({n});
  std::int64_t step = 0;
  const double seconds = op_time(repeats, [&] { ops::adamw_step(p, g, m, v, {}, ++step); });
  return 28.0 * double(n) / seconds;
}

double copy_rate(std::int64_t bytes, int repeats) {
  Tensor from = Tensor::full({bytes / 4}, 1.0f), to = Tensor::empty({bytes / 4});
  return 2.0 * double(bytes) / op_time(repeats, [&] { to.copy_from(from); });
}

// Ranks 0 and 1: half the round trip of a message of `bytes`; the other ranks wait.
double half_round_trip(comm::Communicator& world, std::int64_t bytes, int repeats) {
  Tensor msg = Tensor::zeros({std::max<std::int64_t>(1, bytes / 4)});
  const int rank = world.rank();
  double t = 0;
  if (rank <= 1) {
    t = transfer_time(repeats, [&] {
      if (rank == 0) {
        world.send(msg, 1)->wait();
        world.recv(msg, 1)->wait();
      } else {
        world.recv(msg, 0)->wait();
        world.send(msg, 0)->wait();
      }
    }) / 2;
  }
  Tensor v = Tensor::full({1}, float(t));
  world.all_reduce(v, {.op = comm::ReduceOp::max})->wait();  // rank 0's figure, everywhere
  return v.item();
}

double all_reduce_time(comm::Communicator& world, std::int64_t bytes, int repeats) {
  Tensor buffer = Tensor::zeros({std::max<std::int64_t>(1, bytes / 4)});
  world.barrier()->wait();
  const double t = transfer_time(repeats, [&] { world.all_reduce(buffer)->wait(); });
  Tensor v = Tensor::full({1}, float(t));
  world.all_reduce(v, {.op = comm::ReduceOp::max})->wait();
  return v.item();
}

// Seconds to write `bytes` into a file of this rank's own in `dir` and fsync it (removed after).
double write_seconds(const std::string& dir, std::int64_t bytes, int rank) {
  const std::string path = fmt::format("{}/tidal-calibrate-rank{}-pid{}", dir, rank, ::getpid());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TIDAL_CHECK(fd >= 0, "tidal calibrate: cannot write into --disk-dir '{}': {}", dir, std::strerror(errno));
  std::vector<char> block(std::size_t(8) << 20, 1);
  const auto start = std::chrono::steady_clock::now();
  bool ok = true;
  for (std::int64_t done = 0; ok && done < bytes;) {
    const ssize_t n = ::write(fd, block.data(), std::size_t(std::min<std::int64_t>(bytes - done, std::int64_t(block.size()))));
    ok = n > 0;
    done += n;
  }
  ok = ok && ::fsync(fd) == 0;
  const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ::close(fd);
  ::unlink(path.c_str());
  TIDAL_CHECK(ok, "tidal calibrate: writing {} bytes into --disk-dir '{}' failed: {}", bytes, dir, std::strerror(errno));
  return t;
}

// A save's time on the disk under `dir`: after a pause (a disk's or a VM's write cache drains, as
// between checkpoints), every rank writes a file of its own of `node_bytes / ranks` at once and
// fsyncs it; the slowest rank's time.
double disk_save_time(comm::Communicator& world, const std::string& dir, std::int64_t node_bytes, bool pause) {
  if (pause) std::this_thread::sleep_for(std::chrono::seconds(1));
  world.barrier()->wait();
  Tensor v = Tensor::full({1}, float(write_seconds(dir, node_bytes / world.size(), world.rank())));
  world.all_reduce(v, {.op = comm::ReduceOp::max})->wait();
  return double(v.item());
}

// A save's fixed cost: every rank writes a small file (written, fsynced, renamed into place), then
// rank 0 commits as a checkpoint does - a metadata file the same way, a directory renamed, the
// parent fsynced, `latest` replaced; the slowest rank's time.
double disk_commit_time(comm::Communicator& world, const std::string& dir) {
  // One name for every rank: rank 0's process id (each rank's own left the others' files behind).
  Tensor id = Tensor::full({1}, world.rank() == 0 ? float(::getpid()) : 0.0f);
  world.all_reduce(id, {.op = comm::ReduceOp::max})->wait();
  const std::string own = fmt::format("{}/tidal-calibrate-commit-{}", dir, std::int64_t(id.item()));
  std::filesystem::create_directories(own + ".tmp");
  world.barrier()->wait();
  const auto start = std::chrono::steady_clock::now();
  const std::string small(4096, 'x');
  io::AtomicFile mine(fmt::format("{}.tmp/rank-{}", own, world.rank()));
  mine.write(small.data(), small.size());
  mine.commit();
  world.barrier()->wait();
  if (world.rank() == 0) {
    io::AtomicFile metadata(own + ".tmp/metadata.json");
    metadata.write(small.data(), small.size());
    metadata.commit();
    std::filesystem::rename(own + ".tmp", own);
    io::AtomicFile latest(own + "-latest");
    latest.write(small.data(), 16);
    latest.commit();
  }
  Tensor v = Tensor::full({1}, float(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()));
  world.all_reduce(v, {.op = comm::ReduceOp::max})->wait();
  if (world.rank() == 0) {
    std::filesystem::remove_all(own);
    std::filesystem::remove(own + "-latest");
  }
  world.barrier()->wait();
  return double(v.item());
}

double host_memory_bytes() { return double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE)); }

}  // namespace

namespace {

// What a calibration measures, by CalibrateOptions::quick.
struct Plan {
  explicit Plan(bool quick)
      : quick(quick),
        repeats(quick ? 2 : 5),
        n(quick ? 256 : 2048),
        big(quick ? (std::int64_t(1) << 22) : (std::int64_t(1) << 28)),
        message(quick ? (std::int64_t(1) << 20) : (std::int64_t(1) << 26)),
        keys(quick ? 64 : 1024),
        // Every figure is measured in `passes` passes over all of them, and each is the median of
        // its passes'. A shared VM slows down for seconds at a time: a figure timed in one stretch
        // (its repeats back to back) takes such a spell whole, while passes spread over the
        // calibration see it once (measured, 4 ranks on 2 cores: the fp32 1024^3 product at 0.033
        // TFLOP/s in one calibration, 0.066-0.069 in three others minutes apart; timed in one
        // stretch, the elementwise rate at 2.4 to 4.5 GB/s and the all-reduce's bus bandwidth at
        // 0.75 to 1.05 GB/s over four calibrations within three minutes).
        passes(quick ? 1 : 3),
        // Smaller messages than `message` (the links' bandwidth by message size: a step's are mostly these).
        messages(quick ? std::vector<std::int64_t>{message / 4}
                       : std::vector<std::int64_t>{message / 64, message / 16, message / 4}),
        elementwise_rows(quick ? std::vector<std::int64_t>{256} : std::vector<std::int64_t>{64, 256, 1024}),
        // A save's bytes on the node, smaller ones first (the largest is the bandwidth's).
        saves(quick ? std::vector<std::int64_t>{4 << 20, 16 << 20}
                    : std::vector<std::int64_t>{64 << 20, 256 << 20, 1 << 30}) {}

  bool quick;
  int repeats;
  std::int64_t n, big, message;  // the largest product's size, a copy's bytes, a message's bytes
  std::int64_t keys;             // attention's positions
  int passes;
  std::vector<std::int64_t> messages, elementwise_rows, saves;
  std::int64_t first_gemm() const { return quick ? 64 : 128; }
  // From a ring attention's blocks (16 keys a place at 128 positions over 4 zig-zag places;
  // measured here, fp32 on a core: 16 keys at 19-24 GFLOP/s, 32 at 33-42, 64 at 50-58, a ring's
  // blocks at whole attention's rate of the same size).
  std::int64_t first_keys() const { return 16; }
};

constexpr DType kDtypes[] = {DType::f32, DType::bf16, DType::f16};

// One pass over every figure, in the order read_figures reads them.
std::vector<double> measure_pass(comm::Communicator& world, const Sharing& sharing, const Plan& plan,
                                 const CalibrateOptions& options) {
  const int repeats = plan.repeats;
  std::vector<double> figures;
  for (DType dtype : kDtypes)
    figures.push_back(op_rate(world, sharing, [&] { return gemm_rate(dtype, plan.n, repeats); }));
  // Smaller products run below the peak: the cost model interpolates between these. Each small
  // size repeated as often as the large one's work (the median of more runs: a small product's
  // time is noisier beside the other ranks).
  for (DType dtype : kDtypes)
    for (std::int64_t size = plan.first_gemm(); size < plan.n; size *= 2) {
      const int more = int(std::min<std::int64_t>(50, repeats * (plan.n / size)));
      figures.push_back(op_rate(world, sharing, [&] { return gemm_rate(dtype, size, more); }));
    }
  // Attention of width 256 (4 heads of 64), 4 samples, over `keys` positions, and fewer below.
  for (DType dtype : kDtypes) {
    figures.push_back(op_rate(world, sharing, [&] { return attention_rate(dtype, 4, plan.keys, 256, 4, repeats); }));
    for (std::int64_t t = plan.first_keys(); t < plan.keys; t *= 2) {
      const int more = int(std::min<std::int64_t>(50, repeats * (plan.keys / t)));  // short: more runs
      figures.push_back(op_rate(world, sharing, [&] { return attention_rate(dtype, 4, t, 256, 4, more); }));
    }
  }
  // Elementwise ops on tensors of Hardware::kElementwiseElements, and on smaller ones (a core's
  // caches hold those: measured here, fp32 at 10 GB/s on 256k elements, 8.5 on 2M).
  for (DType dtype : kDtypes) {
    figures.push_back(op_rate(world, sharing, [&] { return elementwise_rate(dtype, 2048, 1024, repeats); }));
    for (std::int64_t rows : plan.elementwise_rows) {
      const int more = int(std::min<std::int64_t>(50, repeats * (2048 / rows)));
      figures.push_back(op_rate(world, sharing, [&] { return elementwise_rate(dtype, rows, 1024, more); }));
    }
  }
  figures.push_back(
      op_rate(world, sharing, [&] { return optimizer_rate(plan.quick ? (1 << 16) : (1 << 22), repeats); }));
  world.barrier()->wait();
  figures.push_back(op_rate(world, sharing, [&] { return copy_rate(plan.big, repeats); }));
  figures.push_back(half_round_trip(world, 4, repeats * 20));
  figures.push_back(half_round_trip(world, plan.message, repeats));
  for (std::int64_t bytes : plan.messages) figures.push_back(half_round_trip(world, bytes, repeats));
  figures.push_back(all_reduce_time(world, 4, repeats * 20));
  figures.push_back(all_reduce_time(world, plan.message, repeats));
  for (std::int64_t bytes : plan.messages) figures.push_back(all_reduce_time(world, bytes, repeats));
  figures.push_back(disk_commit_time(world, options.disk_dir));
  for (std::int64_t bytes : plan.saves)
    figures.push_back(disk_save_time(world, options.disk_dir, bytes, !options.quick));
  return figures;
}

// The figures of every pass, read back in order, each the median of its passes'.
class Medians {
 public:
  explicit Medians(std::vector<std::vector<double>> measured) : measured_(std::move(measured)) {}
  double next() {
    std::vector<double> figure;
    for (const std::vector<double>& figures : measured_) figure.push_back(figures[next_]);
    ++next_;
    std::nth_element(figure.begin(), figure.begin() + std::ptrdiff_t(figure.size() / 2), figure.end());
    return figure[figure.size() / 2];
  }
  bool done() const { return next_ == measured_.front().size(); }

 private:
  std::vector<std::vector<double>> measured_;  // [pass][figure]
  std::size_t next_ = 0;
};

// The compute figures: products, attention, elementwise ops, AdamW and copies by dtype and size.
void read_compute(Hardware& h, Medians& m, const Plan& plan) {
  for (DType dtype : kDtypes) h.flops[dtype] = m.next();
  for (DType dtype : kDtypes)
    for (std::int64_t size = plan.first_gemm(); size < plan.n; size *= 2)
      h.gemm_sizes[dtype].push_back({double(size), m.next()});
  for (DType dtype : kDtypes) {
    h.attention_flops[dtype] = m.next();
    for (std::int64_t t = plan.first_keys(); t < plan.keys; t *= 2) h.attention_sizes[dtype].push_back({double(t), m.next()});
  }
  for (DType dtype : kDtypes) {
    h.elementwise_bandwidth[dtype] = m.next();
    for (std::int64_t rows : plan.elementwise_rows) h.elementwise_sizes[dtype].push_back({double(rows * 1024), m.next()});
  }
  h.optimizer_bandwidth = m.next();
  h.memory_bandwidth = m.next();
  h.bf16_native = ops::cpu::onednn_bf16_native();
  // Host and "device" are the same memory: a move between them is a copy, each byte read and
  // written (the memory bandwidth counts both).
  h.host_device_bandwidth = h.memory_bandwidth / 2;
  h.host_optimizer_bandwidth = h.optimizer_bandwidth;  // and the same cores
}

// The links between `p` ranks, each at a message's size in bytes through the link per message (the
// cost model's measure): a send's bytes; an all-reduce's 2 (p - 1) / p of its buffer. Then the disk.
void read_links(Hardware& h, Medians& m, const Plan& plan, int p) {
  const double pair_latency = m.next(), pair_time = m.next();
  h.intra_node_pair = {.bandwidth = double(plan.message) / std::max(1e-9, pair_time - pair_latency),
                       .latency = pair_latency,
                       .measured_at = double(plan.message)};
  for (std::int64_t bytes : plan.messages)
    h.intra_node_pair.sizes.push_back({double(bytes), double(bytes) / std::max(1e-9, m.next() - pair_latency)});
  const double small = m.next(), large = m.next();
  const double steps = 2.0 * (p - 1);  // a ring all-reduce: p - 1 reduce-scatter and p - 1 all-gather steps
  h.intra_node_collective = {.bandwidth = steps / p * double(plan.message) / std::max(1e-9, large - small),
                             .latency = small / steps,
                             .measured_at = steps / p * double(plan.message)};
  for (std::int64_t bytes : plan.messages)
    h.intra_node_collective.sizes.push_back(
        {steps / p * double(bytes), steps / p * double(bytes) / std::max(1e-9, m.next() - small)});
  // A save: the commit's time its latency, each size's bandwidth beyond it.
  Link disk{.latency = m.next()};
  for (std::int64_t bytes : plan.saves) {
    const double rate = double(bytes) / std::max(1e-9, m.next() - disk.latency);
    if (bytes == plan.saves.back()) disk.bandwidth = rate, disk.measured_at = double(bytes);
    else disk.sizes.push_back({double(bytes), rate});
  }
  h.disk_write = disk;
}

}  // namespace

Hardware calibrate(comm::Communicator& world, const CalibrateOptions& options) {
  const int p = world.size();
  TIDAL_CHECK(p >= 2, "tidal calibrate measures the links between ranks as well: launch it with two ranks or more "
              "on one node (mpirun -np 2 tidal calibrate)");
  TIDAL_ASSERT(2048 * 1024 == Hardware::kElementwiseElements, "calibrate's elementwise size is the hardware file's");
  const Plan plan(options.quick);
  Hardware h;
  h.device = Device::Kind::cpu;
  h.devices_per_node = p;
  h.host_memory = host_memory_bytes();
  h.device_memory = h.host_memory / p;  // the ranks of a node share its memory
  const Sharing sharing = sharing_of(p);
  h.oversubscription = sharing.oversubscription;
  world.barrier()->wait();
  std::vector<std::vector<double>> measured;
  for (int pass = 0; pass < plan.passes; ++pass) measured.push_back(measure_pass(world, sharing, plan, options));
  Medians medians(std::move(measured));
  read_compute(h, medians, plan);
  read_links(h, medians, plan, p);
  TIDAL_ASSERT(medians.done(), "calibrate read fewer figures than it measured");
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const std::time_t now = std::time(nullptr);
  char when[32] = {};
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  h.name = fmt::format("{} ({} ranks, {} threads each)", host, p, omp_get_max_threads());
  h.source = fmt::format("measured by tidal calibrate{} on {} at {}", options.quick ? " --quick" : "", host, when);
  return h;
}

}  // namespace tidal::sim
