// What the subcommands that read a run's config share: -c FILE and --set KEY=VALUE options, and
// the reference of every config key for --help.
#pragma once

#include "config/config.h"

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace tidal::cli {

// A subcommand's config: a TOML file and --set overrides.
struct ConfigArgs {
  std::string path;
  std::vector<std::string> overrides;
  config::Config load() const { return config::load_config(path, overrides); }
};

void add_config_options(CLI::App* cmd, ConfigArgs& args, const std::string& file_help, const std::string& example);
// Every key of the schema with its help and default, for a footer.
std::string config_reference();
// `text` into `path`, atomically.
void write_text(const std::string& path, const std::string& text);

}  // namespace tidal::cli
