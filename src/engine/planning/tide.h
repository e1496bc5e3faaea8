// `tidal trace`: the warm-up iteration's memory tide (patrickstar-v2 Fig. 2 and sec. 7.1). Trains
// the configured model for one step under memory.offload (the warm-up, which the tracer records)
// and returns, per moment - an operator using chunks starts - the device tier's peak in the
// interval after it, split into chunk bytes and non-model bytes. The chart draws it as an SVG
// image: chunks below, non-model data stacked on them, the device cap and the warm-up's chunk
// share as lines.
#pragma once

#include "config/config.h"

#include <nlohmann/json.hpp>

#include <string>

namespace tidal::comm {
class MpiRuntime;  // comm/mpi_runtime.h (in a build with MPI)
}

namespace tidal::engine {

// The config the trace runs: one step (the warm-up), one eval batch; memory.offload = "chunk"
// unless set, and without memory.device_limit a device tier without a cap (the tide then shows
// what the model needs).
config::Config trace_config(config::Config cfg);

// Runs the warm-up of trace_config(cfg). The JSON: "model", "device_limit_bytes" (absent when
// uncapped), "warmup_chunk_bytes" (the chunks' share during the warm-up), "model_data_bytes",
// "peak_non_model_bytes", "least_device_limit_bytes" (the smallest memory.device_limit the run
// trains under: memory_tracer.h's least_limit; 0 under the static partition) and "moments"
// [{moment, operator, device_bytes, chunk_bytes, operator_chunk_bytes, non_model_bytes}].
// Under mpirun (`mpi` of more than one rank, every rank calling it) the layout's warm-up runs and
// each rank returns its own device's tide ("rank" says whose).
nlohmann::json trace_warmup(const config::Config& cfg, comm::MpiRuntime* mpi = nullptr);

// The tide as a standalone SVG document.
std::string tide_svg(const nlohmann::json& tide);

}  // namespace tidal::engine
