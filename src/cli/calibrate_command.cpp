#include "cli/calibrate_command.h"

#include "cli/config_args.h"
#include "core/error.h"
#include "sim/calibrate.h"
#if TIDAL_MPI
#include "comm/mpi_runtime.h"
#endif

#include <fmt/format.h>

namespace tidal::cli {

void add_calibrate_command(CLI::App& app, CalibrateCommand& cmd) {
  cmd.app = app.add_subcommand(
      "calibrate", "Measure this machine (GEMM rates, memory bandwidth, the links between ranks) and write it as a "
                   "hardware file for the cost model");
  cmd.app->add_option("--out", cmd.out, "Where the hardware file goes (TOML)")->capture_default_str();
  cmd.app->add_flag("--quick", cmd.quick, "Small problems and few repeats: seconds, rough figures (tests)");
  cmd.app->add_option("--disk-dir", cmd.disk_dir,
                      "Where to measure the disk's write bandwidth (checkpoints' disk: put it where checkpoint.dir "
                      "will be)")
      ->capture_default_str();
  cmd.app->footer(
      "Every rank measures at once, as ranks compute side by side in training, and an op's figure is the timing "
      "ranks' mean time (a step sums many ops, and each rank's slow ones average out); where the ranks' threads "
      "outnumber the cores (mpirun --oversubscribe), as many ranks as the cores hold time the ops while the others "
      "wait, and the file gives each rank's share with all computing and the oversubscription (the cost model lets "
      "a rank run faster while fewer compute). Each timing is the median of several runs, an op's each on cold "
      "caches (as in a step, where other ops ran since its operands were made), and each figure the median of "
      "three passes over all of them, so that a slow spell of a shared machine counts once (about 45 s on 2 "
      "cores): GEMM FLOP/s in fp32, bf16 and fp16 on a 2048^3 product and on smaller ones "
      "(128^3 up); attention's forward and backward over 1024 positions and fewer (64 up); elementwise ops' and "
      "AdamW's bytes per second; memory bandwidth from a 256 MiB copy; between "
      "ranks 0 and 1 the latency (4 bytes) and bandwidth (64 MiB) of half a round trip; over all ranks the ring "
      "all-reduce's bus bandwidth (as nccl-tests reports it); and the disk under --disk-dir as a checkpoint uses "
      "it: a commit's fixed cost, and saves of 64 MiB, 256 MiB and 1 GiB, the ranks writing their shares at once, "
      "fsynced. Launch it with the ranks of one node that training "
      "will use; the file says where and when it was measured. configs/hardware/ holds others to compare with.\n\n"
      "Examples:\n"
      "  mpirun -np 2 tidal calibrate --out configs/hardware/this-machine.toml\n"
      "  mpirun -np 8 tidal calibrate --out node.toml");
}

void run_calibrate_command(const CalibrateCommand& cmd, engine::Launch& launch) {
#if TIDAL_MPI
  comm::MpiRuntime* mpi = launch.mpi();
#else
  void* mpi = nullptr;
#endif
  TIDAL_CHECK(mpi && launch.world_size() >= 2,
              "tidal calibrate measures the links between ranks as well: launch it with two ranks or more on one node "
              "(mpirun -np 2 tidal calibrate{})",
              cmd.quick ? " --quick" : "");
#if TIDAL_MPI
  const sim::Hardware h = sim::calibrate(*mpi->world(comm::Seconds(600)), {.quick = cmd.quick, .disk_dir = cmd.disk_dir});
  if (!launch.is_main()) return;
  write_text(cmd.out, fmt::format("# {}\n", h.source) + sim::hardware_toml(h));
  if (h.oversubscription > 1)
    fmt::print("the {} ranks' threads oversubscribe the cores {:.3g}x: the rates below are each rank's with all "
               "computing\n",
               h.devices_per_node, h.oversubscription);
  fmt::print("{}\n  GEMM: fp32 {:.1f}, bf16 {:.1f}, fp16 {:.1f} GFLOP/s per rank\n  attention: fp32 {:.1f}, bf16 {:.1f} "
             "GFLOP/s\n  memory: {:.1f} GB/s per rank (copy), elementwise ops fp32 {:.1f}, bf16 {:.1f} GB/s, AdamW {:.1f} GB/s\n"
             "  ranks 0-1: latency {:.1f} us, bandwidth {:.2f} GB/s\n  all-reduce over {}: latency {:.1f} us per step, "
             "bus bandwidth {:.2f} GB/s\n  disk ({}): a save's commit {:.1f} ms, then {:.3f} GB/s for {:.0f} MiB of the node's ranks\nwrote {}\n",
             h.name, h.flops.at(DType::f32) / 1e9, h.flops.at(DType::bf16) / 1e9, h.flops.at(DType::f16) / 1e9,
             h.attention_flops.at(DType::f32) / 1e9, h.attention_flops.at(DType::bf16) / 1e9, h.memory_bandwidth / 1e9,
             h.elementwise_bandwidth.at(DType::f32) / 1e9, h.elementwise_bandwidth.at(DType::bf16) / 1e9,
             h.optimizer_bandwidth / 1e9, h.intra_node_pair.latency * 1e6,
             h.intra_node_pair.bandwidth / 1e9,
             h.devices_per_node, h.intra_node_collective.latency * 1e6, h.intra_node_collective.bandwidth / 1e9,
             cmd.disk_dir, h.disk_write->latency * 1e3, h.disk_write->bandwidth / 1e9,
             h.disk_write->measured_at / 1048576, cmd.out);
#endif
}

}  // namespace tidal::cli
