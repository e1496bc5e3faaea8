// A step's communication on one rank as the counting communicator records it
// (comm/counting_communicator.h): per group and operation the calls, elements, bytes sent and
// link bytes, by the same formulas (comm::volume). The step replay (sim/step_replay.h) adds each
// collective the pipeline and the model data keeper issue, and what the layers' own communicators
// counted as the real modules ran on meta tensors; tests/sim/
// check_cost_model.py compares the sums with a run's per-step `communication` record.
#pragma once

#include "comm/counting_communicator.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>

namespace tidal::sim {

// A collective's seconds on the machine planned for: `calls` operations on `group` (`size` ranks)
// moving `link_bytes` in all through the busiest link (sim/cost_model.cpp's links).
using LinkTime = std::function<double(std::string_view group, int size, std::string_view op, double calls,
                                      double link_bytes)>;

class Traffic {
 public:
  explicit Traffic(LinkTime link = nullptr) : link_(std::move(link)) {}

  // `calls` operations on `group` (`size` ranks), each of `elements` elements of `element_bytes`;
  // `formula_elements`: the buffer comm::volume counts when it is not the elements handed in (an
  // all-gather's output); `roots`: of the calls, those where this rank is the root.
  void add(std::string_view group, int size, std::string_view op, double elements, double element_bytes,
           double calls = 1, double formula_elements = -1, double roots = 0);
  // What a counting communicator recorded (`counted`: its figures since a mark) for `op` on `group`.
  void add_counted(std::string_view group, int size, std::string_view op, const comm::OperationStats& counted);
  // {group: {op: {calls, elements, bytes_sent, link_bytes}}}
  nlohmann::json json() const;
  const std::map<std::pair<std::string, std::string>, comm::OperationStats>& operations() const { return ops_; }
  // The seconds of what was added so far (0 without a LinkTime).
  double seconds() const { return seconds_; }

 private:
  LinkTime link_;
  double seconds_ = 0;
  std::map<std::pair<std::string, std::string>, comm::OperationStats> ops_;
};

}  // namespace tidal::sim
