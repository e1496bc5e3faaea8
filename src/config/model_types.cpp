#include "config/model_types.h"

#include "core/error.h"

#include <mutex>
#include <utility>

namespace tidal::config {
namespace {

constexpr int kBuiltin = 4;

struct Types {
  std::mutex mutex;
  std::vector<std::pair<std::string, ModelTask>> types{{"gpt", ModelTask::causal_lm},
                                                       {"bert", ModelTask::masked_lm},
                                                       {"vit", ModelTask::image_classification},
                                                       {"llama", ModelTask::causal_lm}};
};

Types& types() {
  static Types t;
  return t;
}

}  // namespace

void add_model_type(const std::string& type, ModelTask task) {
  Types& t = types();
  std::lock_guard lock(t.mutex);
  TIDAL_CHECK(!type.empty(), "a model type needs a name");
  for (const auto& [name, _] : t.types)
    TIDAL_CHECK(name != type, "model type \"{}\" is registered already: give your model another name", type);
  t.types.emplace_back(type, task);
}

std::optional<ModelTask> model_task(const std::string& type) {
  Types& t = types();
  std::lock_guard lock(t.mutex);
  for (const auto& [name, task] : t.types)
    if (name == type) return task;
  return std::nullopt;
}

std::string model_type_names() {
  Types& t = types();
  std::lock_guard lock(t.mutex);
  std::string out;
  for (const auto& [name, _] : t.types) out += (out.empty() ? "" : " | ") + name;
  return out;
}

bool builtin_model_type(const std::string& type) {
  Types& t = types();
  std::lock_guard lock(t.mutex);
  for (int i = 0; i < kBuiltin; ++i)
    if (t.types[std::size_t(i)].first == type) return true;
  return false;
}

}  // namespace tidal::config
