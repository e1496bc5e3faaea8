// The schema of the configuration: every known key with its type and where it lives in Config.
// One table serves parsing, overrides, error messages (the list of known keys) and to_toml.
#pragma once

#include "config/config.h"

#include <functional>
#include <string>
#include <variant>
#include <vector>

namespace tidal::config {

using Value = models::KeyValue;  // an integer, a number, a string or true / false

struct Key {
  std::string name;  // "train.steps"
  enum class Type { integer, number, string, boolean } type;
  std::function<void(Config&, const Value&)> set;
  std::function<Value(const Config&)> get;
  std::string help;
  // A string key whose names include true and false (config::Toggle): a TOML boolean is taken
  // as its name.
  bool boolean_names = false;
};

const std::vector<Key>& schema();
// A value as TOML writes it: 10, 0.0003, "cpu", true.
std::string format_value(const Value& v);
const Key* find_key(const std::string& name);

}  // namespace tidal::config
