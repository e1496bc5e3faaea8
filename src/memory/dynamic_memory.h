// PatrickStar's dynamic memory manager (patrickstar-v2 sec. 7): where each chunk's payload lives,
// device or host, and the moves between them. The device tier's capacity L binds the chunks on
// it and the non-model data (activations, workspaces) together.
//
// - A param chunk must be on the device while a tensor in it is COMPUTE (Alg. 1 line 24). Before
//   an operator, to_device() brings it there, first evicting HOLD-like chunks until the chunks
//   fit the room left for them during the coming interval: L - N_j, the non-model peak the
//   warm-up traced for it (memory_tracer.h; sec. 7.3). The victim is the chunk used again
//   furthest in the future (Belady's OPT, from the trace) or, as a baseline, the least recently
//   used one. During the warm-up the chunks may take only min(a fraction of L (default 20%),
//   L - the non-model bytes present) and are evicted in list order. Whenever an allocation
//   would pass L (the non-model data rising within an interval), chunks not in use go to the
//   host first (the tier's reclaimer); the warm-up goes on past L if none is left, and its end
//   tells the least L under which every interval fits - its operator's chunks beside its traced
//   non-model peak (least_device_limit; the trainer stops with it, exit 2, when L is less).
//   Under ZeRO-3 a remote chunk (another rank's, fetched for its group) goes to the host only
//   into room that the rank's own chunks and staging, which the start-up check counted, do not
//   need back (memory.host_limit holds); otherwise it stays until its group frees it.
// - Optimizer states (sec. 7.2): after the warm-up the chunks of master weights, momentum and
//   variance fill the device's margin, L - peak non-model - the param list, in list order; the
//   rest stay on the host. AdamW runs where a chunk's states are (hybrid Adam), so a param chunk
//   whose states are on the host goes there for the step (its gradient out, the updated
//   parameters back at the next use) and one whose states are on the device stays.
// - The static partition (ZeRO-Offload, the baseline of sec. 4): every param chunk stays on the
//   device, every optimizer state on the host; each step moves the gradients down and the
//   parameters back up.
// - The disk tier (OffloadOptions::disk_dir; disk_tier.h), beyond sec. 7.4's CPU: the optimizer
//   states of the last chunks in list order that the host cannot hold under its cap live in a
//   file, decided once when the lists are made (the host is at its fullest then: every chunk is
//   there until the warm-up ends). Param chunks (used every step) and accumulated gradients never
//   go there, and the device margin after the warm-up takes host chunks only. AdamW on a disk
//   chunk runs on the host on its staged states (stage_states), which go back to the file.
//
// - Several chunk managers (a mixture's experts keep lists of their own over the ranks holding
//   the same experts) join the one dynamic memory of the tier: their param chunks are numbered
//   as one list, keeper by keeper, for the trace, the budget and the victims, and the margin takes
//   their optimizer states keeper by keeper.
//
// On a machine without a GPU both tiers are host memory and a move is a copy between allocators
// (the device tier capped by [memory] device_limit), so all of this runs and is checked anywhere.
// On a GPU (train.device = "cuda") the host tier is pinned and a move is an asynchronous copy on
// the copy stream, ordered against the compute stream by events: the host queues a chunk's trip
// to the device and the kernels that use it without waiting; it waits for chunks sent to the
// host once a moment's evictions are queued, and before Adam reads one there. MoveStats::seconds
// is then the host's time queueing moves and waiting for them.
#pragma once

#include "core/allocator.h"
#include "core/tensor.h"
#include "memory/chunk_layout.h"
#include "memory/disk_tier.h"
#include "memory/memory_tracer.h"
#include "memory/policies.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace tidal::memory {

struct OffloadOptions {
  Partition partition = Partition::dynamic;
  Eviction eviction = Eviction::belady;
  double warmup_fraction = 0.2;  // of the device the chunks may take during the warm-up
  std::string disk_dir = "";     // the disk tier's directory ("" = none)
  std::int64_t disk_limit = 0;   // bytes of optimizer states the disk tier may hold (0 = the disk's room)
  bool disk_read_ahead = true;   // the next disk chunk read on a thread (disk_tier.h)
};

// The optimizer's lists whose chunks may live on disk, a record per chunk in this order.
constexpr ChunkKind kDiskKinds[] = {ChunkKind::master, ChunkKind::momentum, ChunkKind::variance};

struct MoveStats {
  std::int64_t bytes_to_host = 0, bytes_to_device = 0;
  std::int64_t evictions = 0;  // param chunks sent to the host to make room
  double seconds = 0;          // in moves
  std::int64_t bytes_to_disk = 0, bytes_from_disk = 0;
  double disk_seconds = 0;  // in disk transfers of its own and waits for the read-ahead
};

class DynamicMemory {
 public:
  using Lists = std::map<ChunkKind, std::vector<Tensor>>;
  // `device`: the device tier (its capacity is L); chunk payloads there come from a share of it,
  // and an allocation that would pass L first sends chunks to the host (its reclaimer).
  DynamicMemory(const OffloadOptions& options, Allocator& device, Allocator& host);
  ~DynamicMemory();
  DynamicMemory(const DynamicMemory&) = delete;
  DynamicMemory& operator=(const DynamicMemory&) = delete;

  // The device tier has one dynamic memory, and every chunk manager with lists in it joins it (a
  // mixture's experts under expert parallelism keep lists of their own beside the rest): one
  // warm-up trace, one budget and one choice of victims over all their param chunks. `lists` are
  // the manager's, `chunks` long, filled after it joins (payloads from initial()); `busy(c)`:
  // its param chunk c has a COMPUTE tensor (it must stay on the device); `remote(c)`: its param
  // chunk c is another rank's, fetched for a group and freed after it (ZeRO-3), so the host's
  // room, counted for the rank's own lists and `host_staging` bytes of the manager's transient
  // buffers there (reduce_staging_bytes), holds none for it. Returns the keeper's id; below, a
  // keeper names its chunks by their index in its own lists.
  int join(Lists& lists, int chunks, std::function<bool(int)> busy, std::function<bool(int)> remote,
           std::int64_t host_staging);
  // Its manager is going: its lists are not read again.
  void leave(int keeper);

  // Where a new chunk of `kind` starts: param chunks on the device under the static partition,
  // everything else on the host (or on disk: on_disk()).
  Allocator& initial(ChunkKind kind);
  // The device tier's share for chunks (a remote chunk fetched for an operator starts there).
  Allocator& chunk_allocator() { return device_chunks_; }
  MemoryTier where(int keeper, ChunkKind kind, int chunk) const;

  // Before the keeper's lists are made: the optimizer states of `chunks` (in list order) live in
  // a file in OffloadOptions::disk_dir (none: the directory is only checked). Their payloads in
  // the lists stay undefined except while staged.
  void keep_on_disk(int keeper, std::vector<int> chunks, std::int64_t chunk_elements, int rank);
  bool on_disk(int keeper, ChunkKind kind, int chunk) const;
  // Chunk c's optimizer states readable through the lists (`modify`: and written back to disk)
  // until unstage_states() or the staging of another chunk; a no-op for a chunk not on disk.
  void stage_states(int keeper, int chunk, bool modify);
  void unstage_states(int keeper);

  // A training iteration (the first is the warm-up): it begins with the first keeper's
  // begin_iteration and ends with the last one's end_iteration. Its moments: begin_moment() before
  // an operator's chunks are placed, end_moment() once they are (the interval starts).
  void begin_iteration(int keeper);
  void end_iteration(int keeper);
  void begin_moment(const std::string& label);
  void end_moment();
  // Alg. 1 line 24 for an operator: its param chunks on the device, other chunks (not busy, of
  // any keeper) evicted until they fit beside the coming interval's non-model data. Chunks placed
  // in a moment stay until it ends.
  void to_device(int keeper, const std::vector<int>& chunks);
  // Before AdamW on `chunk`: its param chunk where its optimizer states are.
  void to_optimizer_side(int keeper, int chunk);
  // After the keeper's step: its disk chunks' states unstaged and (static partition) its param
  // chunks back on the device.
  void after_step(int keeper);

  // After the warm-up: the least device capacity L under which every interval of this rank fits
  // (memory_tracer.h's least_limit; 0 under the static partition), why (the moment that sets
  // it), and the capacity L it has.
  std::int64_t least_device_limit() const;
  std::string least_device_limit_reason() const;
  std::int64_t device_limit() const { return limit(); }

  MoveStats stats() const;  // every keeper's disk transfers included
  const DiskTier* disk(int keeper) const { return keepers_.at(std::size_t(keeper)).disk.get(); }
  DiskTier* disk(int keeper) { return keepers_.at(std::size_t(keeper)).disk.get(); }
  bool has_disk() const;
  const MemoryTracer& tracer() const { return tracer_; }
  std::int64_t device_chunk_bytes() const { return std::int64_t(device_chunks_.current_bytes()); }
  std::int64_t host_chunk_bytes() const { return std::int64_t(host_.current_bytes()); }
  // The device tier's peak (chunks and non-model data) since this was made.
  std::int64_t device_peak_bytes() const;
  nlohmann::json json() const;

 private:
  // A joined manager's lists. Its chunk c is chunk first + c here (the trace's, the victims').
  struct Keeper {
    Lists* lists = nullptr;  // null once it left
    int first = 0, chunks = 0;
    std::function<bool(int)> busy, remote;
    std::int64_t host_staging = 0;
    std::unique_ptr<DiskTier> disk = nullptr;  // with OffloadOptions::disk_dir
    int staged = -1;                           // the disk chunk whose states the lists show
    bool in_iteration = false;
  };
  Keeper& keeper_of(int chunk);
  const Keeper& keeper_of(int chunk) const;
  // Chunk `chunk`'s payload of `kind` (all chunks numbered as one list); null for a keeper gone.
  Tensor* payload(ChunkKind kind, int chunk);
  const Tensor* payload(ChunkKind kind, int chunk) const;
  MemoryTier where(ChunkKind kind, int chunk) const;
  bool on_disk(ChunkKind kind, int chunk) const;
  // The param chunks on the device that may go to the host now: not placed in this moment, not
  // busy, not in `keep` (sorted), and for a remote chunk, with room for it on the host.
  std::vector<int> evictable(const std::vector<int>& keep) const;
  // The host's room for remote chunks: its capacity less what it holds, what the rank's own
  // param chunks on the device take when they come back and the keepers' staging (the start-up
  // check counted them).
  std::int64_t host_room_for_remote() const;
  void move(ChunkKind kind, int chunk, MemoryTier to);
  void to_device(std::vector<int> chunks);
  // Blocks until the chunks sent to the host are there, and lets the host blocks read by copies
  // to the device go (a no-op without a GPU: moves are copies).
  void wait_for_host_copies();
  // The device tier's capacity L, in bytes (during the warm-up the cap it had before).
  std::int64_t limit() const;
  // The device tier's reclaimer: chunks not in use to the host until `over` bytes are free; in
  // the warm-up, when none is left, the cap is lifted until its end (what the run needs is not
  // known before it is traced).
  void reclaim(std::size_t over);
  // The warm-up is traced: the tier's cap back (the model data keeper then checks the least L
  // over every rank: least_device_limit).
  void end_warmup();
  // The bytes param chunks may hold on the device now.
  std::int64_t chunk_budget() const;
  std::int64_t param_bytes_on_device() const;
  // Whether a param chunk's payload is in the device tier's chunk share (param chunks never live on
  // disk).
  bool on_device(const Tensor& param) const;
  int victim(const std::vector<int>& candidates) const;
  void place_optimizer_states();

  OffloadOptions options_;
  Allocator& device_;
  SubAllocator device_chunks_;
  Allocator& host_;
  std::vector<Keeper> keepers_;
  int chunks_ = 0;  // of every keeper
  MemoryTracer tracer_;
  bool in_iteration_ = false, in_moment_ = false;
  int moment_ = -1;                     // in the current iteration
  std::int64_t tick_ = 0;               // moments since the start, for LRU
  std::vector<std::int64_t> last_use_;  // per param chunk, in ticks
  std::int64_t warmup_limit_ = -1;      // L while the warm-up lifts the tier's cap
  std::int64_t device_peak_ = 0;        // before the last reset of the tier's peak
  std::set<int> pinned_;                // placed in the current moment
  bool host_copies_pending_ = false;    // chunks on their way to the host (GPU)
  std::vector<Tensor> retired_;         // host payloads copies to the device may still read (GPU)
  MoveStats stats_;
};

}  // namespace tidal::memory
