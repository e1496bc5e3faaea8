#include "engine/metrics.h"

#include "core/error.h"

namespace tidal::engine {

MetricsWriter::MetricsWriter(const std::string& path) {
  if (path.empty()) return;
  out_.open(path, std::ios::out | std::ios::app);
  TIDAL_CHECK(out_.good(), "cannot open the metrics file '{}' for writing (--metrics)", path);
}

void MetricsWriter::write(const nlohmann::json& record) {
  if (!out_.is_open()) return;
  out_ << record.dump() << '\n';
  out_.flush();
}

}  // namespace tidal::engine
