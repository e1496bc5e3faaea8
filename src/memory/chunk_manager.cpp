#include "memory/chunk_manager.h"

#include "core/bytes.h"
#include "core/gpu.h"
#include "ops/cast.h"
#include "ops/grad_norm.h"
#include "ops/residual.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <string>
#include <tuple>

namespace tidal::memory {
namespace {

// sum += x, with sum fp32 and x of any float type, on either tier: x is widened where it is and
// then copied to sum's (under offload, the fp32 grad list is in host memory and x on the GPU).
void add_into(Tensor sum, const Tensor& x) {
  Tensor wide = x;
  if (x.dtype() != DType::f32) {
    wide = Tensor::empty(x.shape(), DType::f32, allocator_on(x.device()));
    ops::cast(wide, x);
  }
  if (wide.device() != sum.device()) wide = sum.device().is_cuda() ? wide.clone(gpu_allocator()) : on_host(wide);
  ops::accumulate(sum, wide);
}

// Each parameter's users under `m`, by the phase `m` runs in.
void count_users(nn::Module& m, int phase, std::map<const nn::Parameter*, std::map<int, int>>& users) {
  for (nn::Parameter* p : m.used_parameters()) ++users[p][phase];
  for (auto& [name, child] : m.children()) count_users(*child, phase, users);
}

}  // namespace

ChunkSizeRange chunk_size_range_for(const std::vector<std::int64_t>& numels, const ChunkOptions& options,
                                    std::size_t device_capacity) {
  const std::int64_t at_most =
      options.offload ? std::int64_t(options.offload->warmup_fraction * double(device_capacity) / 2 /
                                     double(dtype_size(options.compute_dtype)))
                      : std::numeric_limits<std::int64_t>::max();
  return default_chunk_size_range(numels, at_most);
}

std::int64_t chunk_size_for(const std::vector<std::int64_t>& numels, int group_size, const ChunkOptions& options,
                            std::size_t device_capacity, const std::vector<int>& segment) {
  if (options.chunk_elements) return options.chunk_elements;
  return search_chunk_size(numels, group_size, chunk_size_range_for(numels, options, device_capacity), segment);
}

bool sums_micro_batches_locally(const ChunkOptions& options) {
  return options.accumulate && options.zero_stage <= 1 && !options.offload;
}

bool sums_in_place(const ChunkOptions& options, bool distributed, Device compute) {
  return options.accumulate && (!distributed || sums_micro_batches_locally(options)) && compute.is_cpu();
}

ListShare list_share(const ChunkLayout& layout, const ChunkOptions& options) {
  const int ranks = options.group && options.zero_stage > 0 ? options.group->size() : 1;
  const int owned = layout.chunks / ranks;  // chunks is a multiple of the group's size
  return {.param = options.zero_stage == 3 ? owned : layout.chunks,
          .optimizer = owned,
          .grad = !options.accumulate ? 0 : sums_micro_batches_locally(options) ? layout.chunks : owned};
}

ChunkListBytes chunk_list_bytes(const ChunkLayout& layout, const ChunkOptions& options) {
  const ListShare share = list_share(layout, options);
  return {.param = std::int64_t(share.param) * layout.chunk_elements * std::int64_t(dtype_size(options.compute_dtype)),
          .optimizer = std::int64_t(3 * share.optimizer + share.grad) * layout.chunk_elements *
                       std::int64_t(sizeof(float))};
}

std::int64_t reduce_staging_bytes(const ChunkLayout& layout, const ChunkOptions& options) {
  const bool ring = options.offload && options.offload->partition == Partition::dynamic && options.group &&
                    options.group->size() > 1 && options.zero_stage > 0 && !options.accumulate;
  return ring ? layout.chunk_elements * std::int64_t(dtype_size(options.compute_dtype)) : 0;
}

std::int64_t disk_chunk_bytes(const ChunkLayout& layout) {
  return layout.chunk_elements * std::int64_t(sizeof(float) * std::size(kDiskKinds));
}

std::int64_t host_bytes_needed(const ChunkLayout& layout, const ChunkOptions& options, int disk_chunks) {
  const int owned = list_share(layout, options).optimizer;
  TIDAL_ASSERT(options.offload && disk_chunks >= 0 && disk_chunks <= owned, "{} of {} chunks on disk", disk_chunks,
               owned);
  const ChunkListBytes bytes = chunk_list_bytes(layout, options);
  const std::int64_t all =
      (options.offload->partition == Partition::fixed ? bytes.optimizer : bytes.total()) +
      reduce_staging_bytes(layout, options);
  if (disk_chunks == 0) return all;
  const std::int64_t states = disk_chunk_bytes(layout);
  return all - disk_chunks * states + 2 * states;
}

int disk_chunks_needed(const ChunkLayout& layout, const ChunkOptions& options, std::int64_t room) {
  for (int disk = 0; disk <= list_share(layout, options).optimizer; ++disk)
    if (host_bytes_needed(layout, options, disk) <= room) return disk;
  return -1;
}

ChunkManager::ChunkManager(nn::Module& model, std::vector<nn::Parameter*> params, const ChunkOptions& options,
                           Allocator& device, Allocator& host)
    : ChunkManager(ChunkParameters{.params = std::move(params), .segment = {}, .segments = {}, .users = {&model}}, options,
                   device, host) {}

ChunkManager::ChunkManager(ChunkParameters taken, const ChunkOptions& options, Allocator& device, Allocator& host)
    : params_(std::move(taken.params)), options_(options), segments_(std::move(taken.segments)), device_(&device) {
  if (segments_.empty()) segments_.emplace_back();
  std::vector<int> segment = std::move(taken.segment);
  if (segment.empty()) segment.assign(params_.size(), 0);
  TIDAL_ASSERT(segment.size() == params_.size(), "{} segment ids for {} parameters", segment.size(), params_.size());
  TIDAL_CHECK(options_.zero_stage >= 0 && options_.zero_stage <= 3, "zero.stage must be 0..3, got {}",
              options_.zero_stage);
  const int nproc = distributed() ? options_.group->size() : 1;
  rank_ = distributed() ? options_.group->rank() : 0;
  std::vector<std::int64_t> numels;
  for (const nn::Parameter* p : params_) {
    TIDAL_ASSERT(p->data.defined() && p->data.dtype() == DType::f32, "chunks take materialized fp32 parameters ({})",
                 p->name);
    numels.push_back(p->data.numel());
  }
  layout_ = layout_chunks(numels, chunk_size_for(numels, nproc, options_, device.capacity(), segment), nproc, segment);
  TIDAL_ASSERT(layout_.segments() == int(segments_.size()), "{} segments laid out, {} described", layout_.segments(),
               segments_.size());
  const bool remote_params = options_.zero_stage == 3 && sharded();
  if (options_.offload) {
    if (!options_.tier) own_dmm_ = std::make_unique<DynamicMemory>(*options_.offload, device, host);
    dmm_ = options_.tier ? options_.tier : own_dmm_.get();
    keeper_ = dmm_->join(
        lists_, layout_.chunks, [this](int c) { return busy(c); },
        [this, remote_params](int c) { return remote_params && !owns(c); }, reduce_staging_bytes(layout_, options_));
  }
  if (dmm_) place_tiers(device, host);
  allocate_lists(device, host, remote_params);
  start_group_state();
  take_parameters(taken.users, taken.user_phases, segment);
}

void ChunkManager::allocate_lists(Allocator& device, Allocator& host, bool remote_params) {
  auto make = [&](ChunkKind kind, DType dtype, Allocator& alloc, bool owned_only) {
    std::vector<Tensor>& chunks = lists_[kind];
    Allocator& where = dmm_ ? dmm_->initial(kind) : alloc;
    for (int c = 0; c < layout_.chunks; ++c)
      chunks.push_back((owned_only && !owns(c)) || (dmm_ && dmm_->on_disk(keeper_, kind, c))
                           ? Tensor()
                           : Tensor::zeros({layout_.chunk_elements}, dtype, where));
  };
  make(ChunkKind::param, options_.compute_dtype, device, remote_params);
  make(ChunkKind::master, DType::f32, host, true);
  make(ChunkKind::momentum, DType::f32, host, true);
  make(ChunkKind::variance, DType::f32, host, true);
  if (sums_locally()) {
    // Every chunk's sum, each group's chunks contiguous: reduced in place once a step.
    const std::int64_t C = layout_.chunk_elements;
    std::vector<Tensor>& grads = lists_[ChunkKind::grad];
    for (int g = 0; g < layout_.chunks / layout_.group_size; ++g) {
      grad_groups_.push_back(Tensor::zeros({C * layout_.group_size}, DType::f32, host));
      for (int r = 0; r < layout_.group_size; ++r) grads.push_back(grad_groups_.back().slice(0, r * C, (r + 1) * C));
    }
  } else if (options_.accumulate) {
    make(ChunkKind::grad, DType::f32, host, true);
  }
}

void ChunkManager::start_group_state() {
  reduced_.assign(std::size_t(layout_.chunks / layout_.group_size), false);
  summed_.assign(reduced_.size(), false);
  replicas_started_.assign(reduced_.size(), false);
  pending_.resize(reduced_.size());
  int phases = 1;
  for (std::size_t s = 0; s < segments_.size(); ++s) {
    phases = std::max(phases, segments_[s].phase + 1);
    for (int c = layout_.segment_chunks[s]; c < layout_.segment_chunks[s + 1]; c += layout_.group_size) {
      group_phase_.push_back(segments_[s].phase);
      group_segment_.push_back(int(s));
    }
  }
  in_backward_.assign(std::size_t(phases), false);
  sync_.assign(std::size_t(phases), true);
}

void ChunkManager::set_sync(bool sync, int phase) {
  for (std::size_t p = 0; p < sync_.size(); ++p)
    if (in_phase(phase, int(p))) sync_[p] = sync;
}

void ChunkManager::take_parameters(const std::vector<nn::Module*>& user_modules, const std::vector<int>& user_phases,
                                   const std::vector<int>& segment) {
  TIDAL_ASSERT(user_phases.empty() || user_phases.size() == user_modules.size(), "{} phases for {} users",
               user_phases.size(), user_modules.size());
  std::map<const nn::Parameter*, std::map<int, int>> users;  // phase -> users
  for (std::size_t u = 0; u < user_modules.size(); ++u)
    count_users(*user_modules[u], user_phases.empty() ? kAllPhases : user_phases[u], users);
  in_chunk_.resize(std::size_t(layout_.chunks));
  for (std::size_t i = 0; i < params_.size(); ++i) {
    nn::Parameter* p = params_[i];
    index_[p] = i;
    const int chunk = layout_.places[i].chunk;
    in_chunk_[std::size_t(chunk)].push_back(i);
    tracked_.push_back(track(p, segments_[std::size_t(segment[i])].phase, users[p]));
    if (owns(chunk)) {
      if (dmm_) dmm_->stage_states(keeper_, chunk, true);  // a disk chunk: the file reads as zeros until written
      slot(ChunkKind::master, *p).copy_from(p->data);
    }
    if (resident(chunk)) {
      Tensor param = slot(ChunkKind::param, *p);
      ops::cast(param, p->data);
    } else {
      tracked_.back().state = TensorState::free;  // held by its owner
    }
    p->data = p->grad = Tensor();  // from now on the chunks hold them (access hands out views)
  }
  if (dmm_) dmm_->unstage_states(keeper_);
  mark_group_phases();
}

ChunkManager::Tracked ChunkManager::track(nn::Parameter* p, int phase, const std::map<int, int>& users) {
  Tracked t{.param = p, .phase = phase};
  for (const auto& [in, n] : users) {
    t.users += n;
    if (in == kAllPhases || in == phase) continue;
    t.users_by_phase.resize(std::max(t.users_by_phase.size(), std::size_t(std::max(in, phase) + 1)), 0);
    t.users_by_phase[std::size_t(in)] += n;
  }
  if (!t.users_by_phase.empty() && users.count(phase)) t.users_by_phase[std::size_t(phase)] = users.at(phase);
  return t;
}

void ChunkManager::mark_group_phases() {
  std::size_t phases = in_backward_.size();
  for (const Tracked& t : tracked_) phases = std::max(phases, t.users_by_phase.size());
  in_backward_.resize(phases, false);
  sync_.resize(phases, true);
  for (std::size_t g = 0; g < reduced_.size(); ++g) {
    std::vector<bool> used(phases, false);
    used[std::size_t(group_phase_[g])] = true;
    for (int c = int(g) * layout_.group_size; c < int(g + 1) * layout_.group_size; ++c)
      for (std::size_t i : tensors_of(c))
        for (std::size_t p = 0; p < tracked_[i].users_by_phase.size(); ++p)
          if (tracked_[i].users_by_phase[p] > 0) used[p] = true;
    group_used_in_.push_back(std::move(used));
  }
}

void ChunkManager::place_tiers(Allocator& device, Allocator& host) {
  // Up front, with the whole need: the host holds every chunk the device does not at the
  // start (under the static partition all but the param list) and, in the warm-up, all; with a
  // disk tier, the optimizer states of the last chunks that do not fit go to disk for good.
  const ChunkListBytes bytes = chunk_list_bytes(layout_, options_);
  const bool fixed = options_.offload->partition == Partition::fixed;
  const bool disk_tier = !options_.offload->disk_dir.empty();
  const std::int64_t capacity =
      std::int64_t(std::min<std::size_t>(host.capacity(), std::numeric_limits<std::int64_t>::max()));
  const std::int64_t room = capacity - std::int64_t(host.current_bytes());
  const int disk_chunks = disk_chunks_needed(layout_, options_, room);
  const std::int64_t on_host = memory::host_bytes_needed(layout_, options_, 0);
  const std::int64_t least =
      std::min(on_host, memory::host_bytes_needed(layout_, options_, list_share(layout_, options_).optimizer));
  if (disk_chunks < 0 || (disk_chunks > 0 && !disk_tier))
    throw OutOfMemory(
        fmt::format("out of host memory: the model data takes {} bytes in chunks ({} chunks of {} elements), and the "
                    "host holds {} of them{}; memory.host_limit = {} bytes ({} in use) is too small: {}",
                    bytes.total(), layout_.chunks, layout_.chunk_elements, on_host,
                    fixed ? " (all but the param list)" : " (every chunk, at the start and in the warm-up)", capacity,
                    host.current_bytes(),
                    disk_tier ? fmt::format("with every chunk's optimizer states in memory.disk_dir the host still "
                                            "needs {} bytes (the rest of the lists and two chunks' staging): raise "
                                            "memory.host_limit or make the model smaller",
                                            least)
                              : fmt::format("raise it, set memory.disk_dir to keep the optimizer states that do not "
                                            "fit in a file there (the host then needs at least {} bytes), or make "
                                            "the model smaller",
                                            least)),
        std::size_t(disk_tier ? least : on_host) + host.current_bytes());
  const std::int64_t disk_bytes = disk_chunks * disk_chunk_bytes(layout_);
  TIDAL_CHECK(options_.offload->disk_limit == 0 || disk_bytes <= options_.offload->disk_limit,
              "the optimizer states of the last {} chunks, beyond memory.host_limit, take {} in memory.disk_dir: "
              "more than memory.disk_limit = {}: raise memory.host_limit or memory.disk_limit, or make the model "
              "smaller",
              disk_chunks, human_bytes(std::uint64_t(disk_bytes)),
              human_bytes(std::uint64_t(options_.offload->disk_limit)));
  if (disk_tier) {  // the last of the chunks this rank owns
    std::vector<int> on_disk;
    for (int c = layout_.chunks; c-- > 0 && int(on_disk.size()) < disk_chunks;)
      if (owns(c)) on_disk.insert(on_disk.begin(), c);
    dmm_->keep_on_disk(keeper_, std::move(on_disk), layout_.chunk_elements, rank_);
  }
  if (fixed && std::size_t(bytes.param) + device.current_bytes() > device.capacity())
    throw OutOfMemory(fmt::format("the param list takes {} bytes of the device tier, which holds {} ({} in use)",
                                  bytes.param, device.capacity(), device.current_bytes()),
                      std::size_t(bytes.param) + device.current_bytes());
}

// Parameters outlive the manager (the model owns them) but their data and gradients are views into
// chunks whose payloads come from allocators that may go first (the dynamic memory's share of the
// device tier): a step cut short by an error leaves such views behind. Drop them here.
ChunkManager::~ChunkManager() {
  // A step cut short may leave reductions in flight: their buffers must not outlive their
  // allocators. Their errors, if any, are the failed step's consequence, not news.
  const auto wait_quietly = [](const comm::WorkPtr& w) {
    try {
      w->wait();
    } catch (const std::exception&) {
    }
  };
  if (in_flight_) wait_quietly(in_flight_->work);
  for (const comm::WorkPtr& w : replica_sums_) wait_quietly(w);
  for (Tracked& t : tracked_) t.param->data = t.param->grad = Tensor();
  if (dmm_) dmm_->leave(keeper_);
}

ChunkManager::Tracked& ChunkManager::tracked(const nn::Parameter& p) {
  const auto it = index_.find(&p);
  TIDAL_ASSERT(it != index_.end(), "parameter {} is not managed in chunks", p.name);
  return tracked_[it->second];
}

const ChunkManager::Tracked& ChunkManager::tracked(const nn::Parameter& p) const {
  return const_cast<ChunkManager*>(this)->tracked(p);
}

Tensor ChunkManager::slot(ChunkKind kind, const nn::Parameter& p) const {
  const auto it = lists_.find(kind);
  TIDAL_ASSERT(it != lists_.end(), "no {} chunk list", chunk_kind_name(kind));
  const auto i = index_.find(&p);
  TIDAL_ASSERT(i != index_.end(), "parameter {} is not managed in chunks", p.name);
  const ChunkLayout::Place& place = layout_.places[i->second];
  const Tensor& chunk = it->second[std::size_t(place.chunk)];
  TIDAL_ASSERT(chunk.defined(), "{}: its {} chunk {} is not on this rank (or on disk, not staged)", p.name,
               chunk_kind_name(kind), place.chunk);
  return chunk.slice(0, place.offset, place.offset + p.shape.numel()).reshape(p.shape);
}

Tensor ChunkManager::gradient(const nn::Parameter& p) const {
  return slot(options_.accumulate ? ChunkKind::grad : ChunkKind::param, p);
}

TensorState ChunkManager::state(const nn::Parameter& p) const { return tracked(p).state; }

Placement ChunkManager::placement(int chunk) const {
  std::vector<TensorState> states;
  for (std::size_t i = 0; i < tracked_.size(); ++i)
    if (layout_.places[i].chunk == chunk) states.push_back(tracked_[i].state);
  return placement_of(states);
}

void ChunkManager::set_state(Tracked& t, TensorState to) {
  TIDAL_ASSERT(can_transition(t.state, to), "{}: no transition from {} to {}", t.param->name, state_name(t.state),
               state_name(to));
  t.state = to;
}

void ChunkManager::access(nn::Parameter& p, bool backward) {  // patrickstar-v2 Alg. 1
  Tracked& t = tracked(p);
  const int group = layout_.group_of(layout_.places[index_.at(&p)].chunk);
  if (!group_resident(group)) fetch_group(group);  // the same answer on every rank of the group
  const TensorState old = t.state;
  set_state(t, TensorState::compute);
  p.data = slot(ChunkKind::param, p);
  if (old == TensorState::free) p.data.zero_();
  if (backward && !p.grad.defined())
    p.grad = sums_in_place() ? slot(ChunkKind::grad, p) : Tensor::zeros(p.shape, p.data.dtype());
}

void ChunkManager::release(nn::Parameter& p, TensorState target) {  // patrickstar-v2 Alg. 2
  set_state(tracked(p), target);
  p.data = Tensor();
  const int group = layout_.group_of(layout_.places[index_.at(&p)].chunk);
  if (!distributed()) {
    // The group's gradients are the step's once its last micro-batch's backward completes them.
    if (target == TensorState::hold_after_bwd && sync_[std::size_t(phase_of_group(group))] && group_complete(group))
      start_replica_sums(group);
    return;
  }
  if (target == TensorState::hold_after_bwd && group_complete(group)) reduce_group(group);
  // Alg. 2's training_stage: in forward a group is done when its tensors are all HOLD_AFTER_FWD;
  // in backward (a recomputed forward releases to HOLD_AFTER_FWD too) only once it is reduced,
  // so that a checkpointed block's backward does not fetch again what its recomputation fetched.
  if (options_.zero_stage == 3 && !in_backward_[std::size_t(phase_of_group(group))] &&
      target == TensorState::hold_after_fwd &&
      group_all(group, TensorState::hold_after_fwd))
    free_remote(group);
}

bool ChunkManager::group_resident(int group) const {
  for (int c = group * layout_.group_size; c < (group + 1) * layout_.group_size; ++c)
    if (!resident(c)) return false;
  return true;
}

bool ChunkManager::group_complete(int group) const {
  return group_all(group, TensorState::hold_after_bwd) && !parts_pending(group);
}

bool ChunkManager::parts_pending(int group) const {
  for (int c = group * layout_.group_size; c < (group + 1) * layout_.group_size; ++c)
    for (std::size_t i : tensors_of(c))
      if (tracked_[i].parts_pending > 0) return true;
  return false;
}

bool ChunkManager::group_all(int group, TensorState s) const {
  for (int c = group * layout_.group_size; c < (group + 1) * layout_.group_size; ++c)
    for (std::size_t i : tensors_of(c))
      if (tracked_[i].state != s) return false;
  return true;
}

Tensor ChunkManager::pack(int group) const {
  const std::int64_t C = layout_.chunk_elements;
  Tensor packed = Tensor::empty({C * layout_.group_size}, options_.compute_dtype, *device_);
  for (int r = 0; r < layout_.group_size; ++r)
    packed.slice(0, r * C, (r + 1) * C).copy_from(lists_.at(ChunkKind::param)[std::size_t(group * layout_.group_size + r)]);
  return packed;
}

void ChunkManager::unpack(int group, const Tensor& packed) {
  const std::int64_t C = layout_.chunk_elements;
  for (int r = 0; r < layout_.group_size; ++r)
    list(ChunkKind::param)[std::size_t(group * layout_.group_size + r)].copy_from(packed.slice(0, r * C, (r + 1) * C));
}

void ChunkManager::fetch_group(int group) {
  // Every remote param chunk of the group from its owner (stage 3: into new payloads; stages 1
  // and 2 after the step: over the stale ones), then HOLD.
  const std::int64_t C = layout_.chunk_elements;
  const int first = group * layout_.group_size;
  std::vector<Tensor>& param = list(ChunkKind::param);
  if (options_.fetch == ChunkFetch::broadcast) {
    // ZeRO-DP's way (patrickstar-v1 sec. 6.2): each owner broadcasts its chunk in turn, straight
    // into the chunk's payload (patrickstar-v2 sec. 6.2: one chunk in flight, no group buffer).
    for (int r = 0; r < layout_.group_size; ++r) {
      Tensor& chunk = param[std::size_t(first + r)];
      if (!chunk.defined()) chunk = Tensor::empty({C}, options_.compute_dtype, chunk_memory());
      options_.group->broadcast(chunk, {.root = r})->wait();
    }
  } else if (dmm_) {
    // Under offload, a ring (the all-gather's bytes, N - 1 chunks in and out per rank) straight
    // into the remote chunks' own payloads in the device tier's chunk share: no group buffer
    // beside them, and each can be evicted alone.
    const int n = layout_.group_size, next = (rank_ + 1) % n, prev = (rank_ + n - 1) % n;
    for (int r = 0; r < n; ++r) {
      Tensor& chunk = param[std::size_t(first + r)];
      if (!chunk.defined()) chunk = Tensor::empty({C}, options_.compute_dtype, chunk_memory());
    }
    for (int s = 0; s + 1 < n; ++s) {  // step s passes on what came s steps ago
      const int out = (rank_ - s + n) % n, in = (rank_ - s - 1 + n) % n;
      comm::WorkPtr sent = options_.group->send(param[std::size_t(first + out)], next);
      options_.group->recv(param[std::size_t(first + in)], prev)->wait();
      sent->wait();
    }
  } else {
    // One all-gather into a buffer whose slices become (or fill) the remote chunks' payloads.
    Tensor gathered = Tensor::empty({C * layout_.group_size}, options_.compute_dtype, *device_);
    options_.group->all_gather(gathered, param[std::size_t(first + rank_)])->wait();
    for (int r = 0; r < layout_.group_size; ++r) {
      if (r == rank_) continue;
      Tensor& chunk = param[std::size_t(first + r)];
      if (chunk.defined())
        chunk.copy_from(gathered.slice(0, r * C, (r + 1) * C));
      else
        chunk = gathered.slice(0, r * C, (r + 1) * C);
    }
  }
  // Every tensor of the group HOLD on every rank alike: where a group comes again after its
  // release in a forward (a tied table: the head's use after the embedding's), the owner's own
  // tensors were HOLD_AFTER_FWD, and whether the group is done again must be the same answer on
  // every rank (Alg. 2: its remote chunks freed).
  for (int r = 0; r < layout_.group_size; ++r)
    for (std::size_t i : tensors_of(first + r))
      if (r != rank_ || tracked_[i].state == TensorState::hold_after_fwd) set_state(tracked_[i], TensorState::hold);
}

void ChunkManager::free_remote(int group) {
  const int first = group * layout_.group_size;
  for (int r = 0; r < layout_.group_size; ++r) {
    if (r == rank_) continue;
    for (std::size_t i : tensors_of(first + r)) set_state(tracked_[i], TensorState::free);
    list(ChunkKind::param)[std::size_t(first + r)] = Tensor();
  }
}

Tensor& ChunkManager::pending(int group) {
  Tensor& packed = pending_[std::size_t(group)];
  if (!packed.defined())
    packed = Tensor::zeros({layout_.chunk_elements * layout_.group_size}, options_.compute_dtype, *device_);
  return packed;
}

void ChunkManager::settle(bool at_once) {
  if (!in_flight_) return;
  InFlight done = std::move(*in_flight_);
  in_flight_.reset();
  const auto waiting = comm::Work::Clock::now();
  done.work->wait();
  const double in_flight =
      std::chrono::duration<double>(done.work->completed_at() - done.work->issued_at()).count();
  reduction_time_.in_flight += in_flight;
  reduction_time_.waited +=
      at_once ? in_flight : std::chrono::duration<double>(comm::Work::Clock::now() - waiting).count();
  if (done.store) done.store();
  if (done.last) start_replica_sums(done.group);
}

void ChunkManager::reduce_group(int group) {
  reduced_[std::size_t(group)] = true;
  const bool last = sync_[std::size_t(phase_of_group(group))];
  const int first = group * layout_.group_size;
  // One reduction in flight: the previous group's is stored before this group is packed, so a
  // rank holds one group buffer at a time, as a blocking sum would.
  settle();
  if (sums_locally()) {
    // Each rank's micro-batches are in its grad list already. After the last one's backward the
    // group's sums are reduced over the ranks (stage 0: all-reduced where they lie; stage 1:
    // reduce-scattered, the owned chunk's sum stored once done): nothing reads them before the
    // optimizer, so the reduction runs beside the rest of backward.
    if (!last) return;
    TIDAL_ASSERT(!summed_[std::size_t(group)],
                 "chunk group {} summed over the data ranks twice in a step: with micro-batches, set_sync(false) "
                 "before every backward but the last",
                 group);
    summed_[std::size_t(group)] = true;
    Tensor& sums = grad_groups_[std::size_t(group)];
    if (!sharded()) {
      in_flight_ = InFlight{group, last, options_.group->all_reduce(sums), nullptr};
    } else {
      Tensor mine = Tensor::empty({layout_.chunk_elements}, DType::f32, *device_);
      in_flight_ = InFlight{group, last, options_.group->reduce_scatter(mine, sums), [this, first, mine] {
                              list(ChunkKind::grad)[std::size_t(first + rank_)].copy_from(mine);
                            }};
    }
    return;
  }
  if (options_.accumulate) {
    // This micro-batch's gradients of the group, summed over the ranks and added to the fp32
    // grad list: every chunk at stage 0, the owned one (reduce-scatter) when sharded. It runs
    // beside the rest of this backward, its packed buffer held by the reduction until it is
    // stored, while the next group's gradients fill a buffer of their own (two group buffers
    // at a time, as DeepSpeed's overlap_comm holds). Under offload it is waited for at once.
    const std::int64_t C = layout_.chunk_elements;
    Tensor packed = pending(group);
    pending_[std::size_t(group)] = Tensor();
    if (!sharded()) {
      in_flight_ = InFlight{group, last, options_.group->all_reduce(packed), [this, first, packed, C] {
                              for (int r = 0; r < layout_.group_size; ++r)
                                add_into(list(ChunkKind::grad)[std::size_t(first + r)], packed.slice(0, r * C, (r + 1) * C));
                            }};
    } else {
      Tensor mine = Tensor::empty({C}, options_.compute_dtype, *device_);
      in_flight_ = InFlight{group, last, options_.group->reduce_scatter(mine, packed),
                            // packed: the reduce-scatter's input, kept until the sum is stored
                            [this, first, mine, packed] { add_into(list(ChunkKind::grad)[std::size_t(first + rank_)], mine); }};
    }
    if (dmm_) settle(true);
    if (options_.zero_stage == 3) free_remote(group);
    return;
  }
  if (!sharded()) {
    Tensor packed = pack(group);
    in_flight_ = InFlight{group, last, options_.group->all_reduce(packed), [this, group, packed] { unpack(group, packed); }};
    if (dmm_) settle(true);  // under offload the chunks may move: the sum goes in at once
    return;
  }
  // Sharded (stages 1-3): each rank updates only the chunk it owns, so it needs only that chunk's
  // sum (Megatron's distributed optimizer at stage 1): a reduce-scatter, half an all-reduce's
  // bytes, and stage 1 moves what plain data parallelism moves once the step's gather is added.
  if (dmm_) {
    ring_reduce_scatter(group);
  } else {
    // The sum lands in the owned chunk, which nothing reads before the optimizer; the remote
    // chunks are free to go once packed.
    Tensor packed = pack(group);
    Tensor& owned = list(ChunkKind::param)[std::size_t(first + rank_)];
    in_flight_ = InFlight{group, last, options_.group->reduce_scatter(owned, packed), nullptr};
  }
  if (options_.zero_stage == 3) free_remote(group);
}

void ChunkManager::ring_reduce_scatter(int group) {
  // Step s: the partial sum of chunk r - s - 1 goes to the next rank, the previous rank's of
  // chunk r - s - 2 comes in and is added to this rank's; after N - 1 steps chunk r holds the sum
  // of every rank's (the other chunks hold partial sums, spent: their gradients are not needed).
  const int n = layout_.group_size, first = group * n, next = (rank_ + 1) % n, prev = (rank_ + n - 1) % n;
  std::vector<Tensor>& param = list(ChunkKind::param);
  for (int s = 0; s + 1 < n; ++s) {
    const int out = (rank_ - s - 1 + 2 * n) % n, in = (rank_ - s - 2 + 2 * n) % n;
    Tensor& into = param[std::size_t(first + in)];
    // Beside the chunk it is added to, on whichever tier that chunk is now (on the device, as the
    // step's non-model data).
    Allocator* beside = into.allocator() == &chunk_memory() ? device_ : into.allocator();
    Tensor partial = Tensor::empty({layout_.chunk_elements}, options_.compute_dtype, *beside);
    comm::WorkPtr sent = options_.group->send(param[std::size_t(first + out)], next);
    options_.group->recv(partial, prev)->wait();
    sent->wait();
    ops::accumulate(into, partial);
  }
}

void ChunkManager::store_gradient(Tracked& t) {
  nn::Parameter& p = *t.param;
  if (options_.accumulate && distributed() && !sums_locally()) {
    // Waits in the group's buffer until the group is reduced: added to what is there, which is
    // nothing unless B and W passes of several micro-batches store into the group before it is
    // complete (zero-bubble schedules).
    const ChunkLayout::Place& place = layout_.places[index_.at(&p)];
    const std::int64_t at = std::int64_t(place.chunk % layout_.group_size) * layout_.chunk_elements + place.offset;
    Tensor into = pending(layout_.group_of(place.chunk)).slice(0, at, at + p.shape.numel()).reshape(p.shape);
    ops::accumulate(into, p.grad);
  } else if (options_.accumulate) {
    if (!sums_in_place()) add_into(slot(ChunkKind::grad, p), p.grad);
  } else {
    // The parameter is not needed again before the optimizer step: its slot takes the gradient
    // (Fig. 5).
    Tensor param = slot(ChunkKind::param, p);
    ops::cast(param, p.grad);
  }
  p.grad = Tensor();
  release(p, TensorState::hold_after_bwd);
}

bool ChunkManager::busy(int chunk) const {
  for (std::size_t i : tensors_of(chunk))
    if (tracked_[i].state == TensorState::compute) return true;
  return false;
}

void ChunkManager::access_all(std::span<nn::Parameter* const> params, const std::string& moment, bool backward) {
  bool any = false;
  for (nn::Parameter* p : params) any = any || index_.count(p);
  if (!any) return;
  if (dmm_) {
    dmm_->begin_moment(moment);
    std::vector<int> chunks;
    for (nn::Parameter* p : params)
      if (index_.count(p)) chunks.push_back(layout_.places[index_.at(p)].chunk);
    dmm_->to_device(keeper_, chunks);
  }
  for (nn::Parameter* p : params)
    if (index_.count(p)) access(*p, backward);
  if (dmm_) dmm_->end_moment();
}

void ChunkManager::access_all(nn::Module& m, bool backward) {
  access_all(m.used_parameters(), (backward ? "backward " : "forward ") + m.path(), backward);
}

void ChunkManager::before_forward(nn::Module& m) { access_all(m, false); }

void ChunkManager::after_forward(nn::Module& m) {
  for (nn::Parameter* p : m.used_parameters())
    if (index_.count(p)) release(*p, TensorState::hold_after_fwd);
}

void ChunkManager::before_backward(nn::Module& m) { access_all(m, true); }

void ChunkManager::after_backward(nn::Module& m) {
  for (nn::Parameter* p : m.used_parameters())
    if (index_.count(p)) complete_use(tracked(*p));
}

bool ChunkManager::used_in(const Tracked& t, int phase) {
  return in_phase(phase, t.phase) ||
         (std::size_t(phase) < t.users_by_phase.size() && t.users_by_phase[std::size_t(phase)] > 0);
}

int ChunkManager::users_in(const Tracked& t, int phase) {
  return phase == kAllPhases || t.users_by_phase.empty() ? t.users : t.users_by_phase[std::size_t(phase)];
}

void ChunkManager::complete_use(Tracked& t) {
  TIDAL_ASSERT(t.backward_left > 0, "{}: more backward uses than users (end_forward not called?)", t.param->name);
  if (--t.backward_left > 0) {
    release(*t.param, TensorState::hold);  // another user's backward adds to its gradient
  } else if (in_phase(backward_phase_, t.phase)) {
    if (backward_phase_ != kAllPhases && !t.users_by_phase.empty()) --t.parts_pending;
    store_gradient(t);
  } else {
    other_phase_done(t);
  }
}

// A parameter of several phases: another phase's users of a micro-batch are done. Its own phase's
// backward of that micro-batch, which comes later (ZB-V: the embedding's after the head's), adds
// to the gradient buffer and stores it; a later micro-batch's part may join the buffer before
// then, stored once all the same, in the sum.
void ChunkManager::other_phase_done(Tracked& t) {
  ++t.parts_pending;
  release(*t.param, TensorState::hold);
}

// B and W (zero-bubble pipelines): a deferred parameter's gradient is made and stored by its W
// pass, one micro-batch's at a time, while later micro-batches' forwards and B's go on beside it
// (parts_pending counts the W's to come). Its B handed it a gradient buffer that stays unused:
// dropped here, and W takes a fresh one.
void ChunkManager::after_input_gradient(nn::Module& m, std::span<nn::Parameter* const> deferred) {
  for (nn::Parameter* p : m.used_parameters()) {
    if (!index_.count(p)) continue;
    Tracked& t = tracked(*p);
    if (std::find(deferred.begin(), deferred.end(), p) == deferred.end()) {
      complete_use(t);
      continue;
    }
    ++t.parts_pending;
    if (!t.users_by_phase.empty() && !in_phase(backward_phase_, t.phase)) {
      // The head's part of ZB-V's tied table: it comes in the W, the embedding's in its own B.
      --t.backward_left;
      TIDAL_ASSERT(t.backward_left == 0, "{}: a weight gradient left for the W pass beside another user", p->name);
      other_phase_done(t);
      continue;
    }
    TIDAL_ASSERT(t.users == 1, "{}: a weight gradient left for the W pass, and {} modules use it", p->name, t.users);
    p->grad = Tensor();
    release(*p, TensorState::hold);
  }
}

void ChunkManager::before_weight_gradient(nn::Module& m, std::span<nn::Parameter* const> deferred) {
  access_all(deferred, "weight gradient " + m.path(), true);
}

void ChunkManager::after_weight_gradient(nn::Module&, std::span<nn::Parameter* const> deferred) {
  for (nn::Parameter* p : deferred) {
    if (!index_.count(p)) continue;
    Tracked& t = tracked(*p);
    TIDAL_ASSERT(t.parts_pending > 0, "{}: a W pass without its B", p->name);
    --t.parts_pending;
    store_gradient(t);
  }
}

void ChunkManager::after_backward_part(nn::Module& m) {
  // More blocks of this backward add to the gradients: held, as between two users' backwards.
  for (nn::Parameter* p : m.used_parameters())
    if (index_.count(p)) release(*p, TensorState::hold);
}

void ChunkManager::begin_forward(int phase) {
  for (Tracked& t : tracked_)
    if (used_in(t, phase) && t.state == TensorState::hold_after_fwd) set_state(t, TensorState::hold);
}

void ChunkManager::end_forward(int phase) {
  backward_phase_ = phase;
  for (Tracked& t : tracked_) {
    if (!used_in(t, phase)) continue;
    // An earlier micro-batch's backward (a pipeline schedule) left its tensors HOLD_AFTER_BWD: a
    // group is complete in this backward only when this backward is done with it.
    if (t.state == TensorState::hold_after_fwd || t.state == TensorState::hold_after_bwd)
      set_state(t, TensorState::hold);
    t.backward_left = users_in(t, phase);
  }
  for (std::size_t g = 0; g < reduced_.size(); ++g)
    if (in_phase(phase, phase_of_group(int(g)))) reduced_[g] = false;
  for (std::size_t p = 0; p < in_backward_.size(); ++p)
    if (in_phase(phase, int(p))) in_backward_[p] = true;
}

void ChunkManager::end_forward_only() {
  for (Tracked& t : tracked_)
    if (t.state == TensorState::hold_after_fwd) set_state(t, TensorState::hold);
  // A group fetched again after its release (a tied table: the head uses it after the last
  // block) waits for a backward that will not come: its remote chunks go now.
  if (options_.zero_stage == 3 && sharded())
    for (std::size_t g = 0; g < reduced_.size(); ++g)
      if (group_resident(int(g))) free_remote(int(g));
}

void ChunkManager::end_backward(int phase) {
  // Parameters this pass did not use get a zero gradient, and groups not reduced yet are reduced
  // now: group by group, in the same order on every rank.
  if (dmm_) dmm_->begin_moment("end of backward");
  for (std::size_t g = 0; g < reduced_.size(); ++g) {
    const bool used = phase == kAllPhases || group_used_in_[g][std::size_t(phase)];
    if (!used || (distributed() && reduced_[g])) continue;
    if (parts_pending(int(g))) continue;  // a later micro-batch's W completes it
    if (!group_resident(int(g))) fetch_group(int(g));
    for (int c = int(g) * layout_.group_size; c < int(g + 1) * layout_.group_size; ++c)
      for (std::size_t i : tensors_of(c)) {
        Tracked& t = tracked_[i];
        if (t.state == TensorState::hold_after_bwd) continue;
        TIDAL_ASSERT(!t.param->grad.defined(), "{}: backward ended with its gradient incomplete", t.param->name);
        if (dmm_) dmm_->to_device(keeper_, {c});
        access(*t.param, false);
        if (!options_.accumulate) t.param->data.zero_();
        release(*t.param, TensorState::hold_after_bwd);  // the group's last one reduces it
      }
    if (distributed() && !reduced_[g]) reduce_group(int(g));  // a group of padding chunks
  }
  settle();
  if (dmm_) dmm_->end_moment();
  for (std::size_t p = 0; p < in_backward_.size(); ++p)
    if (in_phase(phase, int(p))) in_backward_[p] = false;
}

Allocator& ChunkManager::chunk_memory() { return dmm_ ? dmm_->chunk_allocator() : *device_; }

Tensor& ChunkManager::gradient_chunk(int chunk) {
  return list(options_.accumulate ? ChunkKind::grad : ChunkKind::param)[std::size_t(chunk)];
}

void ChunkManager::start_replica_sums(int group) {
  const ChunkSegment& segment = segments_[std::size_t(group_segment_[std::size_t(group)])];
  if (dmm_ || segment.replicas.empty() || segment.replicas[0]->size() == 1) return;
  TIDAL_ASSERT(!replicas_started_[std::size_t(group)],
               "chunk group {}: its replica sums started twice in a step (set_sync(false) before every backward but "
               "the last micro-batch's)",
               group);
  replicas_started_[std::size_t(group)] = true;
  for (int c = group * layout_.group_size; c < (group + 1) * layout_.group_size; ++c)
    if (owns(c)) replica_sums_.push_back(segment.replicas[0]->all_reduce(gradient_chunk(c)));
}

void ChunkManager::reduce_replicas() {
  // Level by level (a sum over a grid's columns is complete before the sum over its depth), each
  // owned gradient chunk all-reduced where it lies: no buffer beside the lists. A level's calls
  // are all issued before any is waited for, ordered by group name, then by the segments' replica
  // names and phase - an order every rank shares, so that each group sees its calls in the same
  // order on every rank (nn::tp::reduce_replicated_gradients is the same for parameters held as
  // tensors). The first level's sums of groups completed in backward are running already
  // (start_replica_sums: a group completes at the same point of backward on each of its
  // replicas, which hold the same layers). Under offload a chunk may lie on the host on one rank
  // and on the device on another, and a GPU's communicator picks its transport by where the
  // operand lies: there each chunk goes through one chunk of the device tier, a call at a time.
  struct Step {
    std::size_t level;
    std::string group;
    std::vector<std::string> names;
    int phase;
    std::size_t segment;
    auto key() const { return std::tie(level, group, names, phase); }
  };
  std::vector<Step> steps;
  for (std::size_t s = 0; s < segments_.size(); ++s) {
    std::vector<std::string> names;
    for (const comm::Communicator* g : segments_[s].replicas) names.emplace_back(g->name());
    for (std::size_t level = 0; level < segments_[s].replicas.size(); ++level)
      if (segments_[s].replicas[level]->size() > 1)
        steps.push_back({level, names[level], names, segments_[s].phase, s});
  }
  std::stable_sort(steps.begin(), steps.end(), [](const Step& a, const Step& b) { return a.key() < b.key(); });
  Tensor staged;  // under offload: the one device chunk each sum goes through
  for (std::size_t first = 0; first < steps.size();) {
    std::vector<comm::WorkPtr> level;
    std::size_t last = first;
    for (; last < steps.size() && steps[last].level == steps[first].level; ++last) {
      const std::size_t s = steps[last].segment;
      comm::Communicator& group = *segments_[s].replicas[steps[last].level];
      for (int c = layout_.segment_chunks[s]; c < layout_.segment_chunks[s + 1]; ++c) {
        if (!owns(c) || (steps[last].level == 0 && replicas_started_[std::size_t(layout_.group_of(c))])) continue;
        Tensor& sums = gradient_chunk(c);
        if (!dmm_) {
          level.push_back(group.all_reduce(sums));
          continue;
        }
        if (!staged.defined()) staged = Tensor::empty({layout_.chunk_elements}, sums.dtype(), *device_);
        staged.copy_from(sums);
        group.all_reduce(staged)->wait();
        sums.copy_from(staged);
      }
    }
    if (steps[first].level == 0) {
      for (const comm::WorkPtr& w : replica_sums_) w->wait();
      replica_sums_.clear();
    }
    for (const comm::WorkPtr& w : level) w->wait();
    first = last;
  }
}

void ChunkManager::zero_grad() {
  reduction_time_ = {};
  summed_.assign(summed_.size(), false);
  replicas_started_.assign(replicas_started_.size(), false);
  if (dmm_) dmm_->begin_iteration(keeper_);
  if (options_.accumulate)
    for (Tensor& chunk : list(ChunkKind::grad))
      if (chunk.defined()) chunk.zero_();
}

void ChunkManager::adamw_step(const ops::AdamWOptions& options, std::int64_t step) {
  finish_step([&](const std::vector<nn::Parameter*>& params) {
    std::vector<ops::AdamWTensors> tensors;  // a chunk's parameters in one pass (one launch on a GPU)
    for (nn::Parameter* p : params)
      tensors.push_back({.param = slot(ChunkKind::master, *p),
                         .grad = gradient(*p),
                         .m = slot(ChunkKind::momentum, *p),
                         .v = slot(ChunkKind::variance, *p),
                         .low = slot(ChunkKind::param, *p)});  // the param copy in the same pass
    ops::adamw_steps(tensors, options, step);
  });
}

void ChunkManager::skip_step() {
  finish_step([&](const std::vector<nn::Parameter*>& params) {
    for (nn::Parameter* p : params) {
      Tensor param = slot(ChunkKind::param, *p);
      ops::cast(param, slot(ChunkKind::master, *p));
    }
  });
}

void ChunkManager::finish_step(const std::function<void(const std::vector<nn::Parameter*>&)>& update) {
  if (dmm_) dmm_->begin_moment("optimizer step");
  // A chunk's owned parameters (consecutive in tracked_: a parameter never straddles chunks).
  std::vector<Tracked*> group;
  const auto finish_group = [&] {
    if (group.empty()) return;
    const int chunk = layout_.places[index_.at(group.front()->param)].chunk;
    if (dmm_) dmm_->to_optimizer_side(keeper_, chunk);  // hybrid Adam: where the states are
    std::vector<nn::Parameter*> params;
    for (Tracked* t : group) {
      set_state(*t, TensorState::compute);  // HOLD_AFTER_BWD: the gradient is complete
      params.push_back(t->param);
    }
    update(params);  // the master copies into the param slots: the gradients they held are spent
    for (Tracked* t : group) set_state(*t, TensorState::hold);
    group.clear();
  };
  for (Tracked& t : tracked_) {
    const int chunk = layout_.places[index_.at(t.param)].chunk;
    if (!owns(chunk)) continue;
    if (!group.empty() && layout_.places[index_.at(group.front()->param)].chunk != chunk) finish_group();
    group.push_back(&t);
  }
  finish_group();
  if (dmm_) {
    dmm_->after_step(keeper_);
    dmm_->end_moment();
    dmm_->end_iteration(keeper_);
  }
  if (!sharded() || options_.zero_stage == 3) return;
  // Stages 1 and 2: every rank's param chunks again from their owners.
  for (std::size_t g = 0; g < reduced_.size(); ++g) fetch_group(int(g));
}

double ChunkManager::local_squared_gradient_norm(double before, const ParameterWeight& weight) const {
  std::vector<Tensor> grads;
  std::vector<double> weights;
  for (const Tracked& t : tracked_) {
    if (!owns(layout_.places[index_.at(t.param)].chunk)) continue;
    const double w = weight ? weight(*t.param) : 1.0;
    if (w == 0.0) continue;
    grads.push_back(gradient(*t.param));
    weights.push_back(w);
  }
  const std::vector<double> squares = ops::sums_of_squares(grads);  // one wait on a GPU
  double sum = before;
  for (std::size_t i = 0; i < squares.size(); ++i) sum += weights[i] == 1.0 ? squares[i] : squares[i] * weights[i];
  return sum;
}

const nn::Parameter* ChunkManager::first_nonfinite_gradient() const {
  for (const Tracked& t : tracked_) {
    if (!owns(layout_.places[index_.at(t.param)].chunk)) continue;
    if (!std::isfinite(ops::sum_of_squares(gradient(*t.param)))) return t.param;
  }
  return nullptr;
}

double ChunkManager::squared_gradient_norm(double before) {
  TIDAL_ASSERT(!sharded() || before == 0.0, "a sharded list's norm is summed over its group: add to it after");
  const double sum = local_squared_gradient_norm(before);
  if (!sharded()) return sum;
  Tensor total = Tensor::full({1}, float(sum));
  options_.group->all_reduce(total)->wait();
  return double(total.item());
}


void ChunkManager::gather_state(const StateVisitor& visit) {
  const std::int64_t C = layout_.chunk_elements;
  const ChunkKind kinds[] = {ChunkKind::master, ChunkKind::momentum, ChunkKind::variance};
  for (std::size_t g = 0; g < reduced_.size(); ++g) {
    const int first = int(g) * layout_.group_size;
    Tensor whole[3];  // the group's chunks of each kind, back to back (on the host: a checkpoint's)
    for (Tensor& w : whole) w = Tensor::empty({C * layout_.group_size}, DType::f32, host_allocator());
    if (sharded()) {
      if (dmm_) dmm_->stage_states(keeper_, first + rank_, false);
      for (int k = 0; k < 3; ++k)
        options_.group->all_gather(whole[k], list(kinds[k])[std::size_t(first + rank_)])->wait();
    } else {
      for (int r = 0; r < layout_.group_size; ++r) {
        if (dmm_) dmm_->stage_states(keeper_, first + r, false);
        for (int k = 0; k < 3; ++k)
          whole[k].slice(0, r * C, (r + 1) * C).copy_from(list(kinds[k])[std::size_t(first + r)]);
      }
    }
    for (int r = 0; r < layout_.group_size; ++r)
      for (std::size_t i : tensors_of(first + r)) {
        const nn::Parameter& p = *tracked_[i].param;
        const std::int64_t at = r * C + layout_.places[i].offset;
        auto view = [&](const Tensor& t) { return t.slice(0, at, at + p.shape.numel()).reshape(p.shape); };
        visit(p, view(whole[0]), view(whole[1]), view(whole[2]));
      }
  }
  if (dmm_) dmm_->unstage_states(keeper_);
}

void ChunkManager::held_state(const HeldStateVisitor& visit) {
  DiskTier* disk = dmm_ ? dmm_->disk(keeper_) : nullptr;
  if (dmm_) dmm_->unstage_states(keeper_);
  if (disk) disk->flush();
  const ChunkKind kinds[] = {ChunkKind::master, ChunkKind::momentum, ChunkKind::variance};
  const std::size_t C = std::size_t(layout_.chunk_elements);
  for (int c = 0; c < layout_.chunks; ++c) {
    if (!owns(c)) continue;
    for (std::size_t i : tensors_of(c)) {
      const nn::Parameter& p = *tracked_[i].param;
      std::array<StateView, 3> views;
      for (std::size_t k = 0; k < 3; ++k) {
        if (dmm_ && dmm_->on_disk(keeper_, kinds[k], c)) {
          // A record is the chunk's master copy, momentum and variance back to back (disk_tier.h).
          const std::size_t at = (k * C + std::size_t(layout_.places[i].offset)) * sizeof(float);
          views[k].read = [disk, c, at](std::size_t offset, std::size_t bytes, void* into) {
            disk->read_states(c, at + offset, bytes, into);
          };
        } else {
          views[k].memory = slot(kinds[k], p);
        }
      }
      visit(p, views);
    }
  }
}

void ChunkManager::load_moments(const nn::Parameter& p, const Tensor& momentum, const Tensor& variance) {
  const int chunk = layout_.places[index_.at(&p)].chunk;
  if (!owns(chunk)) return;
  if (dmm_) dmm_->stage_states(keeper_, chunk, true);
  slot(ChunkKind::momentum, p).copy_from(momentum);
  slot(ChunkKind::variance, p).copy_from(variance);
  if (dmm_) dmm_->unstage_states(keeper_);  // the staging buffer keeps them for the next parameter
}

std::int64_t ChunkManager::host_bytes_needed(bool disk) const {
  return memory::host_bytes_needed(layout_, options_, disk ? list_share(layout_, options_).optimizer : 0);
}

std::int64_t ChunkManager::owned_parameter_elements() const {
  std::int64_t n = 0;
  for (const auto& [p, i] : index_)
    if (owns(layout_.places[i].chunk)) n += p->shape.numel();
  return n;
}

std::int64_t ChunkManager::model_data_bytes() const {
  std::int64_t bytes = 0;
  for (const auto& [kind, chunks] : lists_)
    for (const Tensor& c : chunks)
      if (c.defined()) bytes += std::int64_t(c.nbytes());
  return bytes;
}

}  // namespace tidal::memory
