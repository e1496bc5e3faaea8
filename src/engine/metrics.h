// Metrics as JSON lines: one object per step, evals as they happen, a summary line last.
#pragma once

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>

namespace tidal::engine {

class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& path);  // "" = no file
  void write(const nlohmann::json& record);

 private:
  std::ofstream out_;
};

}  // namespace tidal::engine
