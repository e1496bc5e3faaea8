// Saving a run's checkpoints (format 2, metadata.h) from every rank at once, each writing only
// what it owns, in the background or not.
//
// A save, on every rank:
// 1. The plan (once a run: every rank's holdings gathered): each block of a parameter's fp32 state
//    is written by one of the ranks holding it - the least loaded so far, largest blocks first -
//    so replicas, copies of a tensor-parallel block and a tied embedding's two ends write it once
//    and the bytes spread over the ranks.
// 2. Snapshot: where a block lies in device memory (a GPU's, or the capped device tier of a run
//    under offload) and the save is asynchronous, it is copied to host staging; host memory and
//    the disk tier's file are left in place. A synchronous save copies nothing: device memory
//    goes through the writer's staging buffer (checkpoint.buffer_size).
// 3. Each rank writes its file (shard_writer.h) into the step's temporary directory - on a thread
//    of its own when asynchronous, while training goes on. State read in place must not change
//    under it: before_update() waits for the file before the next optimizer update.
// 4. Commit, once every rank's file is complete and synced: the files' reports gathered, rank 0
//    writes metadata.json into the directory, renames it to step-<step>, then moves `latest`, and
//    every rank learns that it did; checkpoints past checkpoint.keep are removed on a thread of
//    rank 0's, beside training. Asynchronous, the same thread commits after its write, over a
//    group of its own (ParallelContext::background(), as PyTorch's async_save takes a process
//    group apart from training's), and the loop learns at a step's end that every rank's save is
//    done (poll(), one small all-reduce while a save is in flight): it waits for the snapshot and
//    for state read in place, never for the commit. A kill at any moment before the rename leaves
//    `latest` naming the previous, complete checkpoint; a temporary directory left behind is
//    removed by the next commit.
// At most one save is in flight; the next waits for it. A rank whose write failed (a full disk)
// fails the save on every rank, naming it and the cause; `latest` stays.
#pragma once

#include "comm/communicator.h"
#include "engine/checkpoint/metadata.h"
#include "engine/checkpoint/shard_writer.h"
#include "nn/parameter.h"

#include <nlohmann/json.hpp>

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace tidal::engine {

struct CheckpointOptions {
  int keep = 2;                               // step directories kept
  bool async = false;                         // write in the background
  std::size_t buffer_bytes = std::size_t(256) << 20;  // the staging buffer of a write
};

// One parameter block's fp32 state as this rank holds it: the weight (the master copy under
// mixed precision), the AdamW momentum and variance, each [param->shape].
struct HeldBlock {
  const nn::Parameter* param = nullptr;
  std::array<memory::StateView, 3> state;
};

class Checkpointer {
 public:
  // What a committed save reports to every rank: its metrics record (checkpoint_stall_s,
  // checkpoint_write_s, checkpoint_bytes, and per rank checkpoint_host_peak_bytes, ...).
  using OnCommit = std::function<void(const nlohmann::json& record)>;
  // `world`: every rank of the run, for the training loop's calls; `background`: the same ranks
  // in a group of their own, for the commit on the writer's thread; `staging`: where snapshots
  // and write buffers come from (host memory; page-locked beside a GPU).
  Checkpointer(CheckpointOptions options, comm::Communicator& world, comm::Communicator& background, Allocator& staging,
               OnCommit on_commit);
  // A save in flight is waited for (it commits if every rank's does), its record never reported.
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Every rank calls it with its `held` blocks (the same parameters on every rank of the same
  // stage and tensor block). A save in flight is committed first. Synchronous: returns once
  // committed; asynchronous: once the writer has started (poll() or finish() commit it).
  void save(const std::string& dir, const CheckpointInfo& info, const std::vector<HeldBlock>& held);
  // Before the model data changes in place (an optimizer update): a write still reading this
  // rank's state where it lies is waited for (the wait counts as the save's stall).
  void before_update();
  // At every step's end, on every rank alike: a save in flight that every rank has committed in
  // the background is reported (on_commit, or its error thrown). A collective only while a save
  // is in flight.
  void poll();
  // The save in flight, if any, waited for and reported, and old checkpoints removed (the run's end).
  void finish();
  bool in_flight() const { return bool(pending_); }

 private:
  struct Plan;     // who writes which block
  struct Pending;  // a save being written
  const Plan& plan(const std::vector<HeldBlock>& held);
  // This rank's file of `job` (its error kept), then the state read in place released.
  void write(Pending& job);
  // Every rank's file done (or failed): the commit over the background group; its metrics record
  // or the error, alike on every rank, kept in `job`.
  void commit(Pending& job);
  // On the training loop, every rank alike: the save in flight waited for, the stall's parts
  // gathered into its record and reported to on_commit, or its error thrown.
  void complete();

  CheckpointOptions options_;
  comm::Communicator& world_;
  comm::Communicator& background_;
  SubAllocator staging_;
  OnCommit on_commit_;
  std::unique_ptr<Plan> plan_;
  std::unique_ptr<Pending> pending_;
  std::thread pruner_;  // rank 0: removing what the last commit left behind (old checkpoints)
};

// A checkpoint of whole fp32 tensors written by one process outside a run (a converter's, a
// test's): `tensors` by global name (a weight's, "m." / "v." + it for moments), published as a
// run's save is.
void write_checkpoint(const std::string& dir, const CheckpointInfo& info,
                      const std::vector<std::pair<std::string, Tensor>>& tensors, int keep = 2);

}  // namespace tidal::engine
