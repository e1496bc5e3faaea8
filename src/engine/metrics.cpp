#include "engine/metrics.h"

#include "core/error.h"

namespace tidal::engine {

MetricsWriter::MetricsWriter(const std::string& path, const std::string& tensorboard_dir) {
  if (!tensorboard_dir.empty()) tensorboard_ = std::make_unique<io::TensorBoardWriter>(tensorboard_dir);
  if (path.empty()) return;
  out_.open(path, std::ios::out | std::ios::app);
  TIDAL_CHECK(out_.good(), "cannot open the metrics file '{}' for writing (--metrics)", path);
}

void MetricsWriter::write(const nlohmann::json& record) {
  if (tensorboard_ && record.contains("step") && !record.contains("summary"))
    tensorboard_->scalars(record, record["step"].get<std::int64_t>());
  if (!out_.is_open()) return;
  out_ << record.dump() << '\n';
  out_.flush();
}

}  // namespace tidal::engine
