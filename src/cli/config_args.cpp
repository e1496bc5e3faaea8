#include "cli/config_args.h"

#include "config/schema.h"
#include "io/atomic_file.h"

#include <fmt/format.h>

namespace tidal::cli {

void add_config_options(CLI::App* cmd, ConfigArgs& args, const std::string& file_help, const std::string& example) {
  cmd->add_option("-c,--config", args.path, file_help);
  cmd->add_option("--set", args.overrides, "Override one key, e.g. --set " + example)
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
}

std::string config_reference() {
  std::string out = "Config keys (TOML sections; any key can be overridden with --set section.key=value):\n";
  const config::Config defaults;
  for (const auto& k : config::schema()) {
    out += fmt::format("  {:<28} {} (default {})\n", k.name, k.help, config::format_value(k.get(defaults)));
  }
  return out;
}

void write_text(const std::string& path, const std::string& text) {
  io::AtomicFile f(path);
  f.write(text.data(), text.size());
  f.commit();
}

}  // namespace tidal::cli
