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
  if (tensorboard_ && record.contains("step") && !record.contains("summary")) {
    if (record.contains("sample_ids")) {  // names, not a quantity to plot
      nlohmann::json scalars = record;
      scalars.erase("sample_ids");
      tensorboard_->scalars(scalars, record["step"].get<std::int64_t>());
    } else {
      tensorboard_->scalars(record, record["step"].get<std::int64_t>());
    }
  }
  if (!out_.is_open()) return;
  out_ << record.dump() << '\n';
  out_.flush();
}

}  // namespace tidal::engine
