#include "sim/checkpoint_cost.h"

#include "io/save_plan.h"
#include "nn/tp/shard.h"

#include <algorithm>
#include <map>
#include <set>

namespace tidal::sim {
namespace {

// The blocks whose state rank `r` keeps (engine/model_data.h's held_state): every block of its
// parameters, or with ZeRO over a list's group (the chunk group, the experts' owners) those in
// the chunks of the list it owns.
std::vector<io::HeldBlockKey> held_blocks(const Job& job, const PlannedRank& r) {
  std::vector<io::HeldBlockKey> out;
  std::set<const nn::Parameter*> others;  // in chunks other ranks own
  if (r.model_data.chunks && job.zero_stage() > 0)
    for (const PlannedChunkList& list : r.chunk_lists) {
      const int index = r.pc->layout().group_index(list.group, r.pc->rank());
      for (std::size_t i = 0; i < list.params.params.size(); ++i)
        if (list.layout.owner_of(list.layout.places[i].chunk) != index) others.insert(list.params.params[i]);
    }
  for (const nn::Parameter* p : r.engine->parameters()) {
    // Parameters outside the device lists (memory.embedding_on_host's) count as held whole.
    if (others.count(p)) continue;
    const io::HeldBlockKey key = nn::tp::save_block_key(*p);
    if (key.bytes > 0) out.push_back(key);
  }
  return out;
}

}  // namespace

nlohmann::json CheckpointCost::json() const {
  return {{"bytes_per_rank", bytes},     {"staging_bytes_per_rank", staging}, {"async", async},
          {"write_s", write},            {"stall_s", stall()},                {"sync_stall_s", sync_stall},
          {"async_stall_s", async_stall}};
}

CheckpointCost checkpoint_cost(const Job& job, const std::vector<PlannedRank>& world,
                               const std::vector<double>& device_state_fraction, const Hardware* hardware, double step,
                               double optimizer) {
  CheckpointCost c;
  const int n = int(world.size());
  std::vector<std::vector<io::HeldBlockKey>> held;
  std::map<std::string, std::int64_t> block_bytes;
  for (const PlannedRank& r : world) {
    held.push_back(held_blocks(job, r));
    for (const io::HeldBlockKey& b : held.back()) block_bytes[b.key] = b.bytes;
  }
  const std::vector<std::vector<std::string>> writes = io::assign_writers(held);
  c.async = job.checkpoint_async == config::Toggle::on || (job.checkpoint_async == config::Toggle::automatic && n > 1);
  for (int r = 0; r < n; ++r) {
    double bytes = 0;
    for (const std::string& key : writes[std::size_t(r)]) bytes += double(block_bytes.at(key));
    c.bytes.push_back(bytes);
    const double on_device = device_state_fraction[std::size_t(r)];
    c.staging.push_back(bytes * on_device);
    if (bytes > 0 && on_device < 1) c.in_place = true;
  }
  if (!hardware || !hardware->disk_write) return c;
  // Ranks write at once: a node's disk takes its ranks' bytes together, then rank 0 commits.
  const Link& disk = *hardware->disk_write;
  const int per_node = std::max(1, hardware->devices_per_node);
  double staged = 0;
  for (int first = 0; first < n; first += per_node) {
    double node = 0;
    for (int r = first; r < std::min(n, first + per_node); ++r) {
      node += c.bytes[std::size_t(r)];
      staged = std::max(staged, c.staging[std::size_t(r)]);
    }
    c.write = std::max(c.write, disk.seconds(node));
  }
  // A snapshot: a GPU's state over the host link; a CPU's a copy, each byte read and written.
  const double snapshot = hardware->device == Device::Kind::cuda ? staged / hardware->host_device_bandwidth
                                                                 : 2 * staged / hardware->memory_bandwidth;
  // In the background the step waits for the files beyond the next forward and backward (state
  // read in place), or, everything staged, for the write and its commit beyond the steps to the
  // next save; the commit (the latency) runs on the writer's thread.
  const double files = c.write - disk.latency,
               to_next = step * double(std::max<std::int64_t>(1, job.checkpoint_every));
  c.async_stall =
      snapshot + (c.in_place ? std::max(0.0, files - (step - optimizer)) : std::max(0.0, c.write - to_next));
  c.sync_stall = c.write;
  return c;
}

}  // namespace tidal::sim
