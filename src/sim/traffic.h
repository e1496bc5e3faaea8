// A step's communication on one rank as the counting communicator records it
// (comm/counting_communicator.h): per group and operation the calls, elements, bytes sent and
// link bytes, by the same formulas (comm::volume). The step replay (sim/step_replay.h) adds each
// collective its layers, the pipeline and the model data keeper issue; tests/sim/
// check_cost_model.py compares the sums with a run's per-step `communication` record.
#pragma once

#include "comm/counting_communicator.h"

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <string_view>
#include <utility>

namespace tidal::sim {

class Traffic {
 public:
  // `calls` operations on `group` (`size` ranks), each of `elements` elements of `element_bytes`;
  // `formula_elements`: the buffer comm::volume counts when it is not the elements handed in (an
  // all-gather's output); `roots`: of the calls, those where this rank is the root.
  void add(std::string_view group, int size, std::string_view op, double elements, double element_bytes,
           double calls = 1, double formula_elements = -1, double roots = 0);
  // {group: {op: {calls, elements, bytes_sent, link_bytes}}}
  nlohmann::json json() const;
  const std::map<std::pair<std::string, std::string>, comm::OperationStats>& operations() const { return ops_; }

 private:
  std::map<std::pair<std::string, std::string>, comm::OperationStats> ops_;
};

}  // namespace tidal::sim
