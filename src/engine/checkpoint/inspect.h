// A checkpoint seen from outside a run (`tidal checkpoint inspect | consolidate`): what it holds
// and where, its checksums verified, and its tensors gathered whole into format 1's two files.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace tidal::engine {

// `path` (a checkpoint directory or a step directory) described: its format, step, data position,
// optimizer counters and the layout that saved it; per file its rank, bytes and blocks; per tensor
// its shape and the pieces each rank's file holds. With `verify`, every block is read and checked
// against its checksum ("verified_bytes"); a damaged one is a tidal::Error naming its file.
nlohmann::json inspect_checkpoint(const std::string& path, bool verify);
// The same as tables for people.
std::string inspect_text(const nlohmann::json& report);

// Every tensor of `path` whole, in a format-1 step directory `out` (model.safetensors with the
// weights, optimizer.safetensors with the moments): what any safetensors reader opens, and what
// tidal resumes from under any layout. Tensor by tensor: never more than the largest in memory.
// Returns the bytes written.
std::uint64_t consolidate_checkpoint(const std::string& path, const std::string& out);

}  // namespace tidal::engine
