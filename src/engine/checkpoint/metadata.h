// What a checkpoint holds, as its metadata says: the run's state (step, data position, seed,
// optimizer counters, config, layout) and, for every global tensor, the blocks the files hold.
//
// Format 2 ("tidal-checkpoint-2"), a step directory of
//   rank-00003.safetensors  one per rank that owns anything: exactly the blocks it wrote, each
//                           under its global tensor's name ("blocks.0.attn.qkv.weight", and the
//                           AdamW moments "m.<name>", "v.<name>"), fp32, openable by any
//                           safetensors reader;
//   metadata.json           written last: for each file its rank, size and the XXH3 checksum of
//                           its header; for each tensor its full shape and dtype and its blocks -
//                           file, key, stored shape, checksums of its bytes (one per 8 MiB), and
//                           the pieces of the full tensor its rows hold (core/tensor_slices.h).
// A block is written by one rank even when several hold it (replicas, copies of a tensor-parallel
// block, the tied embedding at both pipeline ends), so the blocks of a tensor never overlap.
//
// Format 1 ("tidal-checkpoint-1", tidal before format 2): model.safetensors and
// optimizer.safetensors of whole tensors, the run's state in their metadata. It reads as the same
// structure: one block per tensor covering it whole, no checksums.
#pragma once

#include "core/dtype.h"
#include "core/tensor_slices.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tidal::engine {

inline constexpr const char* kCheckpointFormat = "tidal-checkpoint-2";
inline constexpr const char* kWholeCheckpointFormat = "tidal-checkpoint-1";
inline constexpr const char* kMetadataFileName = "metadata.json";

// The optimizer's counters.
struct OptimizerMeta {
  std::int64_t adamw_step = 0;  // updates applied (steps skipped on an fp16 overflow are not)
  double loss_scale = 0;        // fp16's dynamic loss scale; 0 = none
  std::int64_t loss_scale_good_steps = 0;
};

// The run's state a checkpoint keeps beside its tensors. Initialisation, dropout and the data
// order are pure functions of (seed, step, sample): with the step and the samples consumed they
// are the whole random state.
struct CheckpointInfo {
  std::int64_t step = 0;              // training steps completed
  std::int64_t consumed_samples = 0;  // training samples drawn so far (every rank's together)
  std::uint64_t seed = 0;
  OptimizerMeta optimizer = {};
  std::string config_toml = "";
  std::string layout = "{}";  // the saving run's layout (ParallelContext::describe as JSON)
  std::string path = "";      // the step directory read (set by the reader)
};

// The run's state as the metadata writes it (step, consumed_samples, seed, optimizer, layout).
nlohmann::json run_state_json(const CheckpointInfo& info);

struct StoredBlock {
  int file = 0;     // index into CheckpointMetadata::files
  std::string key;  // its tensor's name in that file
  Shape shape;      // as stored: the rows its pieces cover, at their width
  std::vector<Piece> pieces;
  // XXH3 of each segment of its bytes (CheckpointMetadata::checksum_segment_bytes; format 2): a
  // rank reading part of the block checks the segments it reads.
  std::vector<std::uint64_t> checksums = {};
};

struct StoredTensor {
  Shape shape;  // the full tensor's
  DType dtype = DType::f32;
  std::vector<StoredBlock> blocks;
};

struct StoredFile {
  std::string name;  // in the step directory
  int rank = 0;      // the rank that wrote it
  std::uint64_t bytes = 0;
  std::optional<std::uint64_t> header_checksum = std::nullopt;  // XXH3 of its first 8 + header-length bytes (format 2)
};

// The bytes of a block each checksum covers, as format 2 writes them.
inline constexpr std::uint64_t kChecksumSegmentBytes = std::uint64_t(8) << 20;

struct CheckpointMetadata {
  std::string format = kCheckpointFormat;
  CheckpointInfo info;
  std::uint64_t checksum_segment_bytes = kChecksumSegmentBytes;
  std::vector<StoredFile> files;
  std::map<std::string, StoredTensor> tensors;

  nlohmann::json to_json() const;
  // Checks everything a reader relies on (blocks inside their tensors, files named, stored shapes
  // matching the pieces); tidal::Error naming `where` and what is wrong.
  static CheckpointMetadata from_json(const nlohmann::json& j, const std::string& where);
};

// The file name of rank r's blocks.
std::string rank_file_name(int rank);

// The metadata of step directory `step_dir`, of either format; tidal::Error naming the directory
// when it is not a complete checkpoint.
CheckpointMetadata read_metadata(const std::string& step_dir);

// The step directory `path` names: itself when it holds a checkpoint (metadata.json, or format
// 1's model.safetensors), else the one its `latest` file names. tidal::Error when it is neither.
std::string checkpoint_step_dir(const std::string& path);

}  // namespace tidal::engine
