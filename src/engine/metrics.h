// Metrics as JSON lines: one object per step, evals as they happen, a summary line last; and,
// given a directory, the same records as TensorBoard scalars (io/tensorboard.h): every number of
// a step's or an eval's record at its step (nested keys joined by "/"), the summary left out.
#pragma once

#include "io/tensorboard.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <memory>
#include <string>

namespace tidal::engine {

class MetricsWriter {
 public:
  // "" = no file; "" = no TensorBoard events.
  explicit MetricsWriter(const std::string& path, const std::string& tensorboard_dir = "");
  void write(const nlohmann::json& record);

 private:
  std::ofstream out_;
  std::unique_ptr<io::TensorBoardWriter> tensorboard_;
};

}  // namespace tidal::engine
