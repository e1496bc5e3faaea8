#include "engine/step_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace tidal::engine {

nlohmann::json profile_record(const StepProfile::Totals& totals, double step_seconds, double steps) {
  nlohmann::json ops = nlohmann::json::object(), modules = nlohmann::json::object();
  double in_ops = 0.0;
  for (int f = 0; f < kOpFamilies; ++f) {
    ops[op_family_name(OpFamily(f))] = totals.ops[std::size_t(f)] / steps;
    in_ops += totals.ops[std::size_t(f)];
  }
  ops["outside_ops"] = std::max(0.0, step_seconds - in_ops) / steps;
  for (const auto& [kind, s] : totals.modules) modules[kind] = s / steps;
  return {{"step_s", step_seconds / steps}, {"ops_s", ops}, {"modules_s", modules}};
}

void accumulate_profile(StepProfile::Totals& sum, const StepProfile::Totals& more) {
  for (int f = 0; f < kOpFamilies; ++f) sum.ops[std::size_t(f)] += more.ops[std::size_t(f)];
  for (const auto& [kind, s] : more.modules) sum.modules[kind] += s;
}

std::vector<std::string> profile_lines(const nlohmann::json& record) {
  const double step = record["step_s"].get<double>();
  std::vector<std::string> lines{fmt::format("profile: {:.1f} ms per step", 1e3 * step)};
  for (const char* view : {"ops_s", "modules_s"}) {
    std::vector<std::pair<double, std::string>> rows;
    for (const auto& [name, s] : record[view].items()) rows.emplace_back(s.get<double>(), name);
    std::sort(rows.rbegin(), rows.rend());
    std::string line = view == std::string("ops_s") ? "  by op family:  " : "  by module:     ";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (rows[i].first < 5e-4 * step) continue;  // under 0.05% of the step
      line += fmt::format("{}{} {:.1f} ms ({:.0f}%)", i ? ", " : "", rows[i].second, 1e3 * rows[i].first,
                          100.0 * rows[i].first / step);
    }
    lines.push_back(line);
  }
  return lines;
}

}  // namespace tidal::engine
