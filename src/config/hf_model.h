// model.init_from: a Hugging Face directory's config.json fills the [model] keys it decides,
// read through the family whose model_type it names (models/registry.h).
#pragma once

#include "config/config.h"

#include <map>
#include <string>

namespace tidal::config {

// Each key a config file or --set gave, and where ("cfg.toml:12", "--set model.n_layer=4").
using SetBy = std::map<std::string, std::string>;

// Reads cfg.model.init_from's config.json into cfg.model. A key set explicitly to another value
// than the file's is an error naming both; model.seq_len (how long the training sequences are)
// stays the user's, within the file's positions.
void apply_init_from(Config& cfg, const SetBy& set_by);

}  // namespace tidal::config
