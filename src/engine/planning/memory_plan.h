// `tidal plan`: the largest model of the configured width (transformer layers added one at a
// time) that trains under memory.offload within memory.device_limit and memory.host_limit.
//
// The host must hold every chunk at the start and through the warm-up (under the static
// partition: all but the param list): the chunk lists' bytes, exact from the layout
// (chunk_list_bytes). The device tier must hold, at every moment, the operator's chunks beside
// the non-model data (patrickstar-v2 sec. 7.3): at most two chunks (a parameter never straddles
// chunks, a leaf operator's parameters span at most two) plus the non-model peak, which two
// traced warm-ups (one and two layers, no cap) give per layer and which grows linearly with the
// layers (each keeps its activations for backward). That is a bound: where it does not fit, the model's own warm-up is traced (uncapped, at
// its chunk size) for the least device cap it trains under, the figure the run checks at the end
// of its warm-up (memory/dynamic_memory.h). The static partition needs the whole param list on the device instead. With
// memory.disk_dir the disk counts as unlimited room for optimizer states: the host then needs the
// rest of the lists and the disk tier's two staging buffers (host_bytes_needed). Under
// memory.embedding_on_host the embedding layer's lists (of their own, on the host) count on the
// host and are not chunks the device must hold.
//
// Under mpirun (a composed layout) every row is traced: the model of that many layers runs its
// warm-up under the layout, with the device cap (so it lays out the run's chunks) and the host
// uncapped, and each rank reports the least device cap its warm-up needs and the host bytes its
// lists take; a row fits when the largest over the ranks is within each cap (memory.offload =
// "chunk").
#pragma once

#include "config/config.h"
#include "sim/hardware.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tidal::comm {
class MpiRuntime;  // comm/mpi_runtime.h (in a build with MPI)
}

namespace tidal::engine {

struct PlanRow {
  int layers = 0;
  std::int64_t parameters = 0, chunk_size = 0, model_data_bytes = 0;
  std::int64_t host_needs = 0, device_needs = 0;
  std::int64_t disk_needs = 0;  // the optimizer states the host leaves to memory.disk_dir
  bool fits_host = false, fits_device = false;
  bool traced = false;  // device_needs from the model's own traced warm-up (not the bound)
  bool fits() const { return fits_host && fits_device; }
};

struct MemoryPlan {
  std::string model;  // what stays fixed
  int ranks = 1;      // the layout's; the figures are the largest rank's
  std::uint64_t device_limit = 0, host_limit = 0;
  std::uint64_t disk_limit = 0;  // memory.disk_limit (0: none)
  bool predicted = false;        // the non-model peaks from the cost model (--hardware), not traced
  std::int64_t non_model_one = 0, non_model_two = 0;  // traced peaks, 1 and 2 layers
  std::vector<PlanRow> rows;  // 1 layer up to the first that does not fit
  int largest = 0;            // layers; 0 if even one does not fit
  nlohmann::json json() const;
};

// A tidal::Error when a cap is missing, or even one layer does not fit (naming what it needs).
// With `mpi` of more than one rank, every rank calls it (the rows are traced under the layout).
// With `hardware` (one process): the non-model peaks from the cost model's replay on meta
// tensors, nothing run, and the caps the hardware's device and host where memory.device_limit
// and memory.host_limit are unset (a model too large to trace here, planned for that machine).
MemoryPlan plan_memory(const config::Config& cfg, int max_layers, comm::MpiRuntime* mpi = nullptr,
                       const sim::Hardware* hardware = nullptr);
std::string format_memory_plan(const MemoryPlan& plan);

}  // namespace tidal::engine
