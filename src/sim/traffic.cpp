#include "sim/traffic.h"

#include <cmath>

namespace tidal::sim {

void Traffic::add(std::string_view group, int size, std::string_view op, double elements, double element_bytes,
                  double calls, double formula_elements, double roots) {
  if (calls <= 0) return;
  comm::OperationStats& s = ops_[{std::string(group), std::string(op)}];
  const double counted = (formula_elements < 0 ? elements : formula_elements) * element_bytes;
  const comm::Volume root = comm::volume(op, size, counted, true), other = comm::volume(op, size, counted, false);
  s.calls += std::int64_t(std::llround(calls));
  s.elements += std::int64_t(std::llround(calls * elements));
  s.bytes_sent += roots * root.bytes_sent + (calls - roots) * other.bytes_sent;
  s.link_bytes += calls * other.link_bytes;
  if (link_ && size > 1) seconds_ += link_(group, size, op, calls, calls * other.link_bytes);
}

void Traffic::add_counted(std::string_view group, int size, std::string_view op, const comm::OperationStats& counted) {
  if (counted.calls <= 0) return;
  comm::OperationStats& s = ops_[{std::string(group), std::string(op)}];
  s.calls += counted.calls;
  s.elements += counted.elements;
  s.bytes_sent += counted.bytes_sent;
  s.link_bytes += counted.link_bytes;
  if (link_ && size > 1) seconds_ += link_(group, size, op, double(counted.calls), counted.link_bytes);
}

nlohmann::json Traffic::json() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, s] : ops_)
    out[key.first][key.second] = {
        {"calls", s.calls}, {"elements", s.elements}, {"bytes_sent", s.bytes_sent}, {"link_bytes", s.link_bytes}};
  return out;
}

}  // namespace tidal::sim
