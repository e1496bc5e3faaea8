// PatrickStar's chunk-based memory manager (patrickstar-v2 sec. 6.1): a model's parameters live
// in chunk lists instead of tensors of their own, and the module hooks move each parameter's
// tensor between the states of tensor_state.h as modules run.
//
// Lists (chunk_layout.h gives the shared layout): `param` in the compute precision, and the
// optimizer's fp32 `master` copy, `momentum` and `variance`. Gradients reuse the param list
// (Fig. 5): during backward a parameter's gradient grows in a temporary buffer, and when its
// last user's backward is done (a reference count: a tied embedding has two users) it is copied
// over the parameter's own slot, which the step does not need until the optimizer rewrites it
// from the master copy. Gradient accumulation over micro-batches (which PatrickStar lacked)
// cannot reuse the slot - the next micro-batch needs the parameters - so with
// ChunkOptions::accumulate the gradients are summed into a fp32 `grad` list of the same layout
// (with ZeRO, its owned chunks only); on the host, where a rank sums its own micro-batches, the
// backward adds into that list's slot directly (sums_in_place).
//
// Protocol, per micro-batch: begin_forward() (under a pipeline schedule, whose forwards of
// several micro-batches may come before their backwards); the hooks run forward (access ->
// COMPUTE, release -> HOLD_AFTER_FWD); end_forward() resets HOLD_AFTER_FWD to HOLD and arms the
// backward counts;
// the hooks run backward (a recomputed forward inside it releases to HOLD_AFTER_FWD as in the
// forward pass); end_backward() completes the gradients of parameters this pass did not use.
// Under B and W (zero-bubble pipelines: nn/runner.h's after_input_gradient) a linear's weight
// gradient comes in its micro-batch's W pass, after later micro-batches' forwards and B's: the
// tensor waits HOLD for it (Tracked::parts_pending), W takes a fresh gradient buffer, and its
// group is complete only when no W is to come; end_backward runs after the W. A parameter that
// modules of two phases use (ZB-V's rank 0: a table tied between its first chunk's embedding and
// its second's head) lies in the phase whose backward comes last in a micro-batch (the
// embedding's): the other phase's part waits in its gradient buffer (or comes in a W), and its
// group is complete only when no micro-batch's own backward is to come either.
// Between access and release a parameter's `data` (and in backward its `grad`) is a tensor of
// its own shape; outside, both are undefined (Alg. 2 line 38), so a use without access fails
// loudly instead of reading a stale place.
//
// Data parallelism over a group of N ranks: communication groups of N consecutive chunks are
// summed over the ranks when every tensor in them is HOLD_AFTER_BWD (stage 0: all-reduce, every
// rank keeps every list whole).
// Zero-redundancy sharding over the group (sec. 6.2, DeepSpeed's ZeRO):
// the lists are cut into communication groups of N consecutive chunks, rank r owning the r-th
// chunk of each; the optimizer's lists hold owned chunks only, so AdamW runs on them locally.
// When every tensor of a group is HOLD_AFTER_BWD its gradients are complete on every rank and
// the group is reduced into the owner's chunk (reduce-scatter: a rank updates only what it owns,
// so stage 1 needs no more, as Megatron's distributed optimizer; stages 1 and 2 differ only with
// micro-batches, whose sums stage 1 keeps for every chunk, as below). After the step the owners' updated chunks
// are all-gathered back (stages 1 and 2). Stage 3 keeps only owned param chunks: the first access in a group
// all-gathers it (Alg. 1, FetchRemoteChunks), and when all its tensors are HOLD_AFTER_FWD (in
// forward) or reduced (in backward) the remote chunks are freed (Alg. 2, ReleaseRemoteChunks).
// Gradients are summed (the trainer's losses are weighted by the global batch). Without
// accumulation or offload (whose chunks move, and whose sharded sum is a ring of sends on them)
// a group's reduction runs while backward goes on (DeepSpeed's overlap_comm, PyTorch DDP's
// buckets): one group in flight at a time, its packed copy the one group buffer the sum needs
// anyway; the next group's reduction, and end_backward, first wait for it and store its sum.
// With accumulation the param chunks stay intact for the next micro-batch and the sums go to an
// fp32 grad list. At stages 0 and 1 (chunks that stay put) each rank adds its micro-batches'
// gradients into a grad list of every chunk, laid out group by group, and only the last
// micro-batch's completed groups are reduced, one in flight beside the rest of that backward
// (DDP's no_sync, ZeRO-1's unpartitioned gradients: one fp32 sum a step instead of one per
// micro-batch): all-reduced in place at stage 0, reduce-scattered into the owned chunk at stage 1.
// At stages 2 and 3, or under offload, a group's gradients of one micro-batch wait in a packed
// buffer of the group's size until the group is complete, and are then reduced (reduce-scatter,
// or all-reduce at stage 0) and added to a grad list sharded as the optimizer's: beside the rest
// of that micro-batch's backward, one in flight while the next group's buffer fills (two group
// buffers, as DeepSpeed's overlap_comm), or at once under offload.
//
// Under any layout the lists hold the parameters a rank materializes (its tensor-parallel
// blocks, its pipeline stage's); the ranks sharing them (ChunkOptions::group) are its data
// replicas. Parameters that ranks beyond the group hold too come in segments (ChunkSegment)
// whose owned gradient chunks are summed over those ranks, each where it lies: the first level's
// as soon as the step's last backward completes its group (and the data ranks' sum of it is
// stored), beside the rest of backward; reduce_replicas waits for those and runs the further
// levels. An interleaved pipeline's model chunks are phases, each completing its gradients after
// its own backward.
#pragma once

#include "comm/communicator.h"
#include "core/allocator.h"
#include "memory/chunk_layout.h"
#include "memory/dynamic_memory.h"
#include "memory/policies.h"
#include "memory/tensor_state.h"
#include "nn/module.h"
#include "nn/runner.h"
#include "ops/optimizer_step.h"

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tidal::memory {

// How a communication group's param chunks reach every rank (Alg. 1's FetchRemoteChunks at
// stage 3, the gather after the step at stages 1 and 2): one all-gather of the group
// (PatrickStar: 6(p-1)/p M bytes an iteration at stage 3 with the reduce-scatter), or one
// broadcast per chunk from its owner (ZeRO-DP, the baseline of patrickstar-v1 sec. 6.2:
// 10(p-1)/p M, a broadcast costing twice an all-gather's link bytes). Under offload the
// all-gather runs as a ring of sends and receives straight into the chunks' own payloads: the
// same bytes, and no group buffer beside them in the capped device tier.
// (memory/policies.h: ChunkFetch)

// A run of the parameters laid out from a communication-group boundary of its own
// (chunk_layout.h), so its k-th chunk has the same owner on every rank holding it.
struct ChunkSegment {
  // Groups of ranks beyond the data group that hold these same parameters and saw other samples
  // (a tensor grid's rows, columns or depth; the pipeline's end stages for a tied embedding):
  // once the data group's sum is done, the owned gradient chunks are summed over each of them in
  // turn (ChunkManager::start_replica_sums, reduce_replicas).
  std::vector<comm::Communicator*> replicas;
  // The model chunk of this rank (an interleaved pipeline's virtual stage) whose layers use these
  // parameters: end_forward and end_backward of a phase complete its segments alone.
  int phase = 0;
};

// One of a parameter's optimizer states where a checkpoint finds it: a view of its slot in memory
// (host or device), or, for a state in the disk tier, a reader of its bytes there.
struct StateView {
  Tensor memory = Tensor();  // [p.shape] fp32, when in memory
  std::function<void(std::size_t offset, std::size_t bytes, void* into)> read = nullptr;  // when on disk
};

// What a chunk manager takes over.
struct ChunkParameters {
  std::vector<nn::Parameter*> params;  // materialized fp32, in initialisation order
  std::vector<int> segment;            // per parameter, its index in `segments` (empty: all in one)
  std::vector<ChunkSegment> segments;  // empty: one, without replicas, phase 0
  std::vector<nn::Module*> users;      // the modules this rank runs (their uses are counted)
  // Per user, the model chunk (phase) whose passes run it; empty: each parameter's segment's.
  std::vector<int> user_phases = {};
};

struct ChunkOptions {
  std::int64_t chunk_elements = 0;   // 0 = search_chunk_size
  DType compute_dtype = DType::f32;  // the param list (bf16 / fp16 under mixed precision)
  bool accumulate = false;           // gradients of several micro-batches: a fp32 grad list
  int zero_stage = 0;                // 1..3 with a group: what is sharded over it
  comm::Communicator* group = nullptr;  // the data-parallel ranks sharing the model data
  ChunkFetch fetch = ChunkFetch::all_gather;
  // Heterogeneous memory (dynamic_memory.h): chunks move between the device tier and the host.
  std::optional<OffloadOptions> offload = std::nullopt;
  // ... under the device tier's dynamic memory when other managers' lists share the tier (it is
  // made with their offload options and device and host tiers); null: one of the manager's own.
  DynamicMemory* tier = nullptr;
};

// The sizes the manager searches for parameters of `numels`: the default range, and chunks that
// move must leave room to move: under offload two fit in the warm-up's share of a device tier of
// `device_capacity` bytes.
ChunkSizeRange chunk_size_range_for(const std::vector<std::int64_t>& numels, const ChunkOptions& options,
                                    std::size_t device_capacity);
// The chunk size (elements) the manager uses over `group_size` ranks: options.chunk_elements, or
// the search's pick in chunk_size_range_for.
// `segment` as layout_chunks takes it.
std::int64_t chunk_size_for(const std::vector<std::int64_t>& numels, int group_size, const ChunkOptions& options,
                            std::size_t device_capacity, const std::vector<int>& segment = {});

// Whether micro-batches' gradients are summed by each rank in an fp32 grad list of every chunk,
// which the ranks then reduce once a step (stages 0 and 1, chunks that stay put); otherwise each
// micro-batch's are reduced and the grad list is sharded as the optimizer's.
bool sums_micro_batches_locally(const ChunkOptions& options);

// Whether a rank's backward adds each parameter's gradient into its fp32 slot of the grad list
// directly (Megatron-LM's gradient accumulation fusion: the weight gradient's product accumulates
// into the fp32 sum), with no buffer a micro-batch to zero, widen and add: with accumulation, where
// the rank sums its micro-batches itself (alone, or sums_micro_batches_locally over `distributed`
// ranks), on the host, whose kernels add low-precision values into an fp32 gradient (the GPU's
// take their compute precision's, so there the buffer stays).
bool sums_in_place(const ChunkOptions& options, bool distributed, Device compute);

// The chunks of each list one rank keeps between steps: with ZeRO over options.group's N ranks,
// its own 1/N of the optimizer's lists (stages 1-3) and of the param list (stage 3); otherwise
// every chunk. With accumulation, the fp32 grad list's: every chunk where micro-batches are
// summed locally (sums_micro_batches_locally), else the optimizer's.
struct ListShare {
  int param = 0, optimizer = 0, grad = 0;
};
ListShare list_share(const ChunkLayout& layout, const ChunkOptions& options);

// The bytes of one rank's chunk lists of `layout` (its list_share, every chunk whole, padding
// included): the param list in the compute precision, then the fp32 master copy, momentum,
// variance and gradient sum.
struct ChunkListBytes {
  std::int64_t param = 0, optimizer = 0;
  std::int64_t total() const { return param + optimizer; }
};
ChunkListBytes chunk_list_bytes(const ChunkLayout& layout, const ChunkOptions& options);

// Under ChunkOptions::offload's dynamic partition with ZeRO over several ranks and one micro-batch:
// the ring reduce-scatter's partial sum, one chunk in the compute precision beside the chunk it is
// added to, which may be on the host then (ChunkManager::ring_reduce_scatter); else 0.
std::int64_t reduce_staging_bytes(const ChunkLayout& layout, const ChunkOptions& options);
// The optimizer states of one chunk that the disk tier holds (memory.disk_dir): its fp32 master
// copy, momentum and variance (kDiskKinds).
std::int64_t disk_chunk_bytes(const ChunkLayout& layout);
// Under ChunkOptions::offload, the bytes of one rank's lists the host tier holds at the start and
// through the warm-up: every chunk of its share (the static partition: all but the param list);
// with the optimizer states of its last `disk_chunks` chunks on disk, those less, plus the disk
// tier's two staging buffers (disk_tier.h); and the reduce-scatter's (reduce_staging_bytes).
std::int64_t host_bytes_needed(const ChunkLayout& layout, const ChunkOptions& options, int disk_chunks);
// How many of a rank's chunks' optimizer states go to disk for the host to hold the rest in
// `room` bytes: the fewest that fit (0: no disk tier needed); -1 when even all on disk is not
// enough.
int disk_chunks_needed(const ChunkLayout& layout, const ChunkOptions& options, std::int64_t room);

class ChunkManager final : public nn::ModuleHooks {
 public:
  // Takes over the parameters, counting their users among the given modules. Their values move
  // into the lists: `param` chunks come from `device`, the optimizer's lists from `host`. With
  // ChunkOptions::offload, `device` is the device tier (its capacity binds chunks and non-model
  // data) and every list may live in either; with its disk_dir, the optimizer states the host
  // cannot hold live on disk.
  ChunkManager(ChunkParameters params, const ChunkOptions& options, Allocator& device = host_allocator(),
               Allocator& host = host_allocator());
  // `params` in one segment, their users among the modules under `model`.
  ChunkManager(nn::Module& model, std::vector<nn::Parameter*> params, const ChunkOptions& options,
               Allocator& device = host_allocator(), Allocator& host = host_allocator());
  ~ChunkManager() override;
  ChunkManager(const ChunkManager&) = delete;
  ChunkManager& operator=(const ChunkManager&) = delete;

  void before_forward(nn::Module& m) override;
  void after_forward(nn::Module& m) override;
  void before_backward(nn::Module& m) override;
  void after_backward(nn::Module& m) override;
  void after_backward_part(nn::Module& m) override;
  void after_input_gradient(nn::Module& m, std::span<nn::Parameter* const> deferred) override;
  void before_weight_gradient(nn::Module& m, std::span<nn::Parameter* const> deferred) override;
  void after_weight_gradient(nn::Module& m, std::span<nn::Parameter* const> deferred) override;
  // Around the forward and the backward of one micro-batch through the model chunk `phase`
  // (kAllPhases: every one). begin_forward is needed only when forwards of several micro-batches
  // may run before their backwards (a pipeline schedule): it returns what an earlier forward left
  // HOLD_AFTER_FWD to HOLD, so that a group counts as done in this forward only when this forward
  // is done with it.
  static constexpr int kAllPhases = -1;
  void begin_forward(int phase = kAllPhases);
  void end_forward(int phase = kAllPhases);
  void end_backward(int phase = kAllPhases);
  // With accumulation: whether the backward about to run is its phase's last micro-batch of the
  // step. Where micro-batches are summed locally (sums_micro_batches_locally) only that one's
  // completed groups are reduced over the data ranks, earlier ones adding into each rank's own
  // grad list (DDP's no_sync); elsewhere every micro-batch's are. Default: true.
  // Per phase (ZB-V: a micro-batch's B's of the two chunks are far apart).
  void set_sync(bool sync, int phase = kAllPhases);
  // After a forward pass without backward (evaluation).
  void end_forward_only();
  // After the last micro-batch's backward: each segment's owned gradient chunks summed over its
  // replicas (ChunkSegment::replicas), level by level; the first level's, started in backward,
  // waited for.
  void reduce_replicas();
  // Before a step's micro-batches: zeroes the accumulated gradients (ChunkOptions::accumulate)
  // and starts a training iteration (the first is the memory tracer's warm-up).
  void zero_grad();
  // The step's group reductions over the data ranks since zero_grad (not under offload's ring):
  // seconds in flight, and of them the seconds this rank stood waiting for one to finish.
  struct ReductionTime {
    double in_flight = 0, waited = 0;
  };
  const ReductionTime& reduction_time() const { return reduction_time_; }

  // Alg. 1 and 2 for one parameter. `backward`: a gradient buffer is attached on access. Under
  // offload its chunk must be on the device already (the module hooks place an operator's chunks).
  void access(nn::Parameter& p, bool backward);
  void release(nn::Parameter& p, TensorState target);

  // AdamW on every parameter (with ZeRO: every owned one) from its complete gradient, then the
  // param list is rewritten from the updated master copy (HOLD_AFTER_BWD -> COMPUTE -> HOLD) and,
  // at stages 1 and 2, all-gathered. `step` counts from 1; options.grad_scale divides out a loss
  // scale and clipping.
  void adamw_step(const ops::AdamWOptions& options, std::int64_t step);
  // A step whose gradient overflowed: the same, without the update (the gradient is dropped).
  void skip_step();
  // The squared norm of the step's gradient (owned parts, summed over the group): not finite on
  // every rank when any rank's part overflowed. The sum starts from `before` (another list's, for
  // the order of one list).
  double squared_gradient_norm(double before = 0.0);
  // The owned parts' share alone (no communication), each parameter's sum of squares times
  // weight(p) (default 1): a caller sums it over the ranks holding other parts.
  using ParameterWeight = std::function<double(const nn::Parameter&)>;
  double local_squared_gradient_norm(double before = 0.0, const ParameterWeight& weight = {}) const;
  // The first parameter (in the list's order) of the owned parts whose gradient is not finite, or
  // null: what a diverged step names.
  const nn::Parameter* first_nonfinite_gradient() const;

  // For a checkpoint: visits every parameter with its whole fp32 master copy, momentum and
  // variance (views valid during the call), on every rank of the group (a collective: the owners'
  // chunks are all-gathered a communication group at a time). Disk chunks are read back.
  using StateVisitor = std::function<void(const nn::Parameter&, const Tensor& master, const Tensor& momentum,
                                          const Tensor& variance)>;
  void gather_state(const StateVisitor& visit);
  // For a checkpoint, which reads them beside training until the next adamw_step or skip_step:
  // every parameter whose optimizer states this rank keeps (with ZeRO, those of its owned chunks;
  // else all), with where its fp32 master copy, momentum and variance lie now - views of their
  // slots, or for states in the disk tier readers of its file (brought up to date here).
  using HeldStateVisitor = std::function<void(const nn::Parameter&, const std::array<StateView, 3>&)>;
  void held_state(const HeldStateVisitor& visit);
  // From a checkpoint: p's moments, where this rank owns p (its master copy came from p.data).
  // Parameters in order keep a disk chunk staged from one to the next.
  void load_moments(const nn::Parameter& p, const Tensor& momentum, const Tensor& variance);

  bool manages(const nn::Parameter& p) const { return index_.count(&p) > 0; }
  // Whether this rank keeps p's optimizer states (with ZeRO: it owns p's chunk).
  bool keeps_state(const nn::Parameter& p) const { return owns(layout_.places[index_.at(&p)].chunk); }
  TensorState state(const nn::Parameter& p) const;
  Placement placement(int chunk) const;  // of param chunk `chunk`
  const ChunkLayout& layout() const { return layout_; }
  const std::vector<nn::Parameter*>& parameters() const { return params_; }
  // p's slot in a list (a view of its shape). After end_backward, gradient() is the step's
  // gradient: the param slot, or the grad list's with accumulation. Not for optimizer states on
  // disk (gather_state reads those).
  Tensor slot(ChunkKind kind, const nn::Parameter& p) const;
  Tensor gradient(const nn::Parameter& p) const;
  // Bytes held in memory by every chunk of every list (the model data), remote chunks in flight
  // included; optimizer states on disk not.
  std::int64_t model_data_bytes() const;
  // Elements of the parameters in the chunks this rank owns: those whose optimizer states it
  // keeps (fp32 master, momentum, variance; chunk padding not counted).
  std::int64_t owned_parameter_elements() const;
  bool owns(int chunk) const { return !sharded() || layout_.owner_of(chunk) == rank_; }
  bool resident(int chunk) const { return lists_.at(ChunkKind::param)[std::size_t(chunk)].defined(); }
  // The dynamic memory manager (null without ChunkOptions::offload), and this manager's disk tier
  // in it (null without one).
  const DynamicMemory* dynamic_memory() const { return dmm_; }
  const DiskTier* disk_tier() const { return dmm_ ? dmm_->disk(keeper_) : nullptr; }
  // Under offload: the bytes of this rank's lists the host holds at the start and in the warm-up
  // (host_bytes_needed), with every optimizer state it may send to disk there when `disk`.
  std::int64_t host_bytes_needed(bool disk) const;

 private:
  struct Tracked {
    nn::Parameter* param;
    TensorState state = TensorState::hold;
    int users = 0;          // modules that use it (a forward or backward each)
    int backward_left = 0;  // users whose backward is still to come in this pass
    // W passes to come of micro-batches whose B deferred its gradient, and (used by other phases
    // too) its own phase's backwards to come of micro-batches whose other phases' are done.
    int parts_pending = 0;
    int phase = 0;          // its segment's
    // Where modules of other phases use it too (ZB-V's rank 0: a table tied between the
    // embedding of its first chunk and the head of its second), its users in each phase; empty:
    // all in `phase`. Its segment's phase is the one whose backward comes last (the embedding's).
    std::vector<int> users_by_phase = {};
  };
  // p in the phase of its segment, with its users by phase (`users`: phase -> users).
  static Tracked track(nn::Parameter* p, int phase, const std::map<int, int>& users);
  // Each communication group's phases (group_used_in_), once the parameters are tracked.
  void mark_group_phases();
  // Whether the passes of `phase` use t, and how many of its users run in them.
  static bool used_in(const Tracked& t, int phase);
  static int users_in(const Tracked& t, int phase);
  Tracked& tracked(const nn::Parameter& p);
  const Tracked& tracked(const nn::Parameter& p) const;
  void set_state(Tracked& t, TensorState to);
  // The gradient buffer of p is complete: into its slot (or summed into the grad list).
  void store_gradient(Tracked& t);
  std::vector<Tensor>& list(ChunkKind kind) { return lists_.at(kind); }
  // Data-parallel ranks share the model: gradients are summed over them.
  bool distributed() const { return options_.group && options_.group->size() > 1; }
  // ... and ZeRO splits the optimizer's lists (and more) between them.
  bool sharded() const { return distributed() && options_.zero_stage > 0; }
  // Micro-batches summed in each rank's own grad list of every chunk, reduced once a step.
  bool sums_locally() const { return distributed() && sums_micro_batches_locally(options_); }
  // A parameter's gradient buffer in backward is its slot of the grad list (memory::sums_in_place).
  bool sums_in_place() const { return memory::sums_in_place(options_, distributed(), device_->device()); }
  // The parameters (tracked_ indices) in each chunk.
  const std::vector<std::size_t>& tensors_of(int chunk) const { return in_chunk_[std::size_t(chunk)]; }
  // The phase of a communication group (its segment's), and whether `phase` is `of`'s.
  int phase_of_group(int group) const { return group_phase_[std::size_t(group)]; }
  static bool in_phase(int phase, int of) { return phase == kAllPhases || phase == of; }
  // Where a param chunk's payload comes from: the dynamic memory's share of the device tier
  // under offload (so it counts, and may move, as a chunk), else the param list's allocator.
  Allocator& chunk_memory();
  // The chunk holding chunk c's gradient after backward: the grad list's with accumulation, else
  // the param list's.
  Tensor& gradient_chunk(int chunk);
  bool group_all(int group, TensorState s) const;
  // Every tensor of the group HOLD_AFTER_BWD and no W pass to come: its gradients are complete.
  bool group_complete(int group) const;
  bool parts_pending(int group) const;
  // One backward use of t done: the gradient stored after its last user's.
  void complete_use(Tracked& t);
  // A parameter of several phases: another phase's users of a micro-batch are done (its own
  // phase's backward of it is to come).
  void other_phase_done(Tracked& t);
  bool group_resident(int group) const;
  // Alg. 1's FetchRemoteChunks (stage 3; stages 1 and 2 after the step) and Alg. 2's release of
  // the remote chunks (stage 3).
  void fetch_group(int group);
  void free_remote(int group);
  // A group's gradients are complete: sum them over the ranks (started here; see settle).
  void reduce_group(int group);
  // Waits for the reduction in flight, if any, and stores its sum where the step reads it.
  // `at_once`: it was started to be waited for (the step did nothing beside it).
  void settle(bool at_once = false);
  // A group's gradients are the step's (summed over the data ranks): its owned chunks' sums over
  // the first level of their segment's replicas start, to run beside the rest of backward (not
  // under offload, whose chunks may move: reduce_replicas sums them all).
  void start_replica_sums(int group);
  // The reduce-scatter of a group's param chunks under offload: a ring of sends and receives on
  // the chunks' own payloads (the same bytes, one chunk of buffer instead of the group's).
  void ring_reduce_scatter(int group);
  // With accumulation over a group: a micro-batch's gradients of the group wait here, packed,
  // until the group is reduced into the grad list.
  Tensor& pending(int group);
  // The owned parameters from HOLD_AFTER_BWD back to HOLD, a chunk's at a time through
  // `update(params)`, which rewrites each one's param slot from its master copy; at stages 1 and
  // 2 gathered again.
  void finish_step(const std::function<void(const std::vector<nn::Parameter*>&)>& update);
  // Under offload, before the lists are made: the host's room checked against what it must hold,
  // and the optimizer states that do not fit sent to the disk tier (ChunkOptions::offload's
  // disk_dir); the static partition's param list checked against the device tier.
  void place_tiers(Allocator& device, Allocator& host);
  // The chunk lists: the params' (each rank's own only under ZeRO-3 when `remote_params`), and
  // the owned master weights, moments and gradient sums, in the tier each starts in (a disk
  // chunk has none).
  void allocate_lists(Allocator& device, Allocator& host, bool remote_params);
  // Each communication group's reduction flags and phase (its segment's).
  void start_group_state();
  // The parameters' places, users (counted among its users, by phase) and states; their values move
  // into the chunks (fp32 master copies on their owners, the compute dtype where resident).
  void take_parameters(const std::vector<nn::Module*>& user_modules, const std::vector<int>& user_phases,
                       const std::vector<int>& segment);
  // A moment of the memory tracer around placing the chunks of `m`'s parameters.
  void access_all(nn::Module& m, bool backward);
  void access_all(std::span<nn::Parameter* const> params, const std::string& moment, bool backward);
  // Param chunk c holds a tensor in COMPUTE (it must stay on the device).
  bool busy(int chunk) const;
  // The param chunks of a group, packed contiguous (for a collective), and back.
  Tensor pack(int group) const;
  void unpack(int group, const Tensor& packed);

  std::vector<nn::Parameter*> params_;
  ChunkOptions options_;
  ChunkLayout layout_;
  // Before the lists: under offload their payloads go back to its share of the device tier. The
  // manager's own dynamic memory, or ChunkOptions::tier; the lists are its keeper `keeper_`.
  std::unique_ptr<DynamicMemory> own_dmm_;
  DynamicMemory* dmm_ = nullptr;
  int keeper_ = -1;
  std::map<ChunkKind, std::vector<Tensor>> lists_;  // kind -> chunk payloads
  std::map<const nn::Parameter*, std::size_t> index_;
  std::vector<Tracked> tracked_;
  std::vector<std::vector<std::size_t>> in_chunk_;
  std::vector<ChunkSegment> segments_;
  std::vector<int> group_phase_;  // per communication group
  // Per communication group, the phases whose passes use it (its own, and where a parameter of it
  // is used by others too, theirs): end_backward of each sweeps it.
  std::vector<std::vector<bool>> group_used_in_;
  std::vector<int> group_segment_;  // per communication group, its segment
  // The first level of the replica sums, started as groups complete (start_replica_sums), and
  // whether each group's has started in this step.
  std::vector<comm::WorkPtr> replica_sums_;
  std::vector<bool> replicas_started_;
  std::vector<bool> reduced_;     // per communication group, in this backward pass
  std::vector<bool> summed_;      // per communication group, in this step (sums_locally)
  std::vector<Tensor> grad_groups_;  // sums_locally: each group's grad chunks, contiguous
  std::vector<bool> in_backward_;  // per phase: between end_forward and end_backward
  int backward_phase_ = kAllPhases;  // the backward running now (end_forward's phase)
  std::vector<Tensor> pending_;  // per communication group (accumulate and distributed)
  // The group reduction in flight (reduce_group) and what stores its sum once it is done; `last`:
  // the sum is the step's (its last micro-batch's), so the replica sums may start once it is stored.
  struct InFlight {
    int group = 0;
    bool last = false;
    comm::WorkPtr work;
    std::function<void()> store;
  };
  std::optional<InFlight> in_flight_;
  std::vector<bool> sync_;  // set_sync, per phase
  ReductionTime reduction_time_;
  int rank_ = 0;
  Allocator* device_;
};

}  // namespace tidal::memory
