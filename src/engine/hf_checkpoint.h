// Hugging Face weights in and out (the family's adapter, models/hf_adapter.h, says where each
// parameter lives there).
// In (model.init_from): each rank copies exactly its blocks of its own parameters (its tensor
// shards, its pipeline stage's) out of the memory-mapped files and gives each tensor's pages
// back once copied, so no rank ever holds the whole model. Out (tidal export --format hf): a
// tidal checkpoint's whole tensors in the names, shapes and layouts transformers expects.
#pragma once

#include "comm/communicator.h"
#include "io/hf_layout.h"
#include "models/model_config.h"
#include "nn/parameter.h"

#include <cstdint>
#include <functional>
#include <span>
#include <string>

namespace tidal::engine {

struct HfLoadReport {
  std::int64_t tensors = 0;        // parameters of this rank filled
  std::uint64_t file_bytes = 0;    // the directory's weights, all of them
  std::uint64_t copied_bytes = 0;  // bytes this rank copied out of them
  double seconds = 0;
  std::uint64_t rss_before_bytes = 0;  // the process's resident memory before loading (its parameters included)
  std::uint64_t peak_rss_bytes = 0;    // the process's peak resident memory after loading
};

// Fills `params` (this rank's, materialized) from the Hugging Face directory `dir` of a model of
// `model` (its family's adapter). Every rank checks the whole directory against it first, so all
// fail alike: a tensor missing, one more than the architecture has, a wrong shape or dtype -> a
// tidal::Error naming the file and the tensor.
HfLoadReport load_hf_weights(const std::string& dir, const models::ModelConfig& model,
                             std::span<nn::Parameter* const> params);

// p's block (p materialized) from `views`, the files' tensors of src.hf_names in order, laid out
// as src says (transposed, stacked, query heads reordered) and converted to p's dtype.
void copy_from_hf(nn::Parameter& p, const io::HfTensorSource& src, const std::vector<Tensor>& views);

struct HfExportReport {
  std::string architecture;
  std::int64_t tensors = 0;
  std::uint64_t bytes = 0;
  int files = 0;  // safetensors files written (more than one: sharded, with an index)
  std::uint64_t largest_tensor_bytes = 0;  // of tidal's tensors
  std::uint64_t peak_bytes = 0;      // this rank's memory for tensors and the buffer at its peak
  std::uint64_t peak_rss_bytes = 0;  // the process's peak resident memory
};

// The staging buffer of an export's transposed tensors (GPT-2's Conv1D weights), at most.
inline constexpr std::size_t kExportBufferBytes = std::size_t(64) << 20;

// Where an export's tidal tensors come from: each whole tensor's shape, and its values in fp32 on
// the host (read one at a time).
struct WholeTensor {
  std::function<Shape(const std::string& tidal_name)> shape;
  std::function<Tensor(const std::string& tidal_name, Allocator& memory)> read;
};
// How the weights are cut into files: `stem`.safetensors, or numbered shards and an index above
// max_shard_bytes.
struct HfFiles {
  std::string stem = "model";
  std::uint64_t max_shard_bytes = std::uint64_t(2) << 30;
};
// Writes the Hugging Face tensors of `sources` from `whole` into out_dir (created) as `files`
// says, streaming: at most one tidal tensor and a 64 MiB buffer held. With `world`, every rank of
// it calls this and writes every world-size-th shard; rank 0 the index.
HfExportReport write_hf_tensors(const std::vector<io::HfTensorSource>& sources, const WholeTensor& whole,
                                const std::string& out_dir, const HfFiles& files, comm::Communicator* world);

// `text` as the file `path`, atomically.
void write_text_file(const std::string& path, const std::string& text);

// Writes `checkpoint` (a step directory, or a checkpoint directory and its `latest`, saved under
// any layout) to `out_dir` as config.json and model.safetensors (numbered shards and
// model.safetensors.index.json above max_shard_bytes), loadable with from_pretrained. Streaming:
// tidal's tensors are read whole one at a time and written piece by piece, so a rank holds at
// most the largest tensor and a 64 MiB buffer. With `world`, every rank of it calls this and
// writes every world-size-th shard; rank 0 writes the index and config.json.
// A checkpoint of LoRA adapters (finetune.method = "lora") exports with `merge`: its base (from
// model.init_from) with the adapters folded in, the whole model held in memory.
HfExportReport export_hf(const std::string& checkpoint, const std::string& out_dir,
                         std::uint64_t max_shard_bytes = std::uint64_t(2) << 30, comm::Communicator* world = nullptr,
                         bool merge = false);

}  // namespace tidal::engine
