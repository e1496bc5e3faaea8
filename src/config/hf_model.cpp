#include "config/hf_model.h"

#include "config/schema.h"
#include "core/error.h"
#include "models/registry.h"

#include <cmath>

namespace tidal::config {

void apply_init_from(Config& cfg, const SetBy& set_by) {
  const std::string dir = cfg.model.init_from;
  Config file = cfg;  // the directory's values of the keys it decides
  const std::vector<std::string> decided = models::read_hf_config(dir, file.model);
  for (const std::string& name : decided) {
    const Key& key = *find_key(name);
    const Value value = key.get(file);
    const auto given = set_by.find(name);
    if (given != set_by.end()) {
      const Value mine = key.get(cfg);
      const bool same = std::holds_alternative<double>(mine)
                            ? std::abs(std::get<double>(mine) - std::get<double>(value)) <= 1e-6 * std::abs(std::get<double>(value))
                            : mine == value;
      TIDAL_CHECK(same, "{} = {} ({}) contradicts model.init_from's {}/config.json, which gives {}: leave {} unset "
                  "(the directory decides it)", name, format_value(mine), given->second, dir, format_value(value),
                  name);
    }
    key.set(cfg, value);
  }
  // A model of fewer positions than model.seq_len's default trains on sequences of its length.
  const std::int64_t positions = models::model_traits(cfg.model).positions;
  if (positions > 0 && !set_by.count("model.seq_len") && cfg.model.seq_len > positions) cfg.model.seq_len = positions;
}

}  // namespace tidal::config
