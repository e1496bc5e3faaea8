// Where a tensor's bytes live: host memory or one CUDA device - or nowhere: a meta tensor has a
// shape, a dtype and an address of its own but no bytes, and the ops on it record what they would
// cost instead of computing (ops/meta/recorder.h; the planner runs the real modules on them).
#pragma once

#include <string>

namespace tidal {

struct Device {
  enum class Kind { cpu, cuda, meta };
  Kind kind = Kind::cpu;
  int index = 0;

  static Device cpu() { return {Kind::cpu, 0}; }
  static Device cuda(int i = 0) { return {Kind::cuda, i}; }
  static Device meta() { return {Kind::meta, 0}; }
  bool is_cpu() const { return kind == Kind::cpu; }
  bool is_cuda() const { return kind == Kind::cuda; }
  bool is_meta() const { return kind == Kind::meta; }
  bool operator==(const Device&) const = default;
  std::string str() const { return is_cpu() ? "cpu" : is_meta() ? "meta" : "cuda:" + std::to_string(index); }
};

}  // namespace tidal
