#include "models/registry.h"

#include "models/builtin_families.h"

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <vector>

namespace tidal::models {
namespace {

// The registered families in the order added, the built-in ones first (added on the first use).
struct Families {
  std::mutex mutex;
  std::vector<std::unique_ptr<Family>> list;  // never removed: references to them stay valid
};

void add(Families& fs, Family f) {  // the caller holds the lock
  TIDAL_CHECK(!f.name.empty(), "a model family needs a name");
  TIDAL_CHECK(f.build != nullptr, "register_family(\"{}\"): no builder given", f.name);
  for (const FamilyKey& k : f.keys)
    TIDAL_CHECK(std::find(std::begin(kKeysOfEveryFamily), std::end(kKeysOfEveryFamily), k.name) ==
                    std::end(kKeysOfEveryFamily),
                "register_family(\"{}\"): model.{} is a key every family has (models/model_config.h): give the "
                "family's own key another name", f.name, k.name);
  for (const auto& g : fs.list) {
    TIDAL_CHECK(g->name != f.name, "model type \"{}\" is registered already: give your model another name", f.name);
    for (const FamilyKey& k : f.keys)
      for (const FamilyKey& h : g->keys)
        TIDAL_CHECK(k.name != h.name || (k.fallback.index() == h.fallback.index() && k.names == h.names),
                    "register_family(\"{}\"): model.{} is \"{}\"'s key of another type or values; a key two "
                    "families read has one type: give yours another name", f.name, k.name, g->name);
  }
  fs.list.push_back(std::make_unique<Family>(std::move(f)));
}

// The families, locked for the caller.
struct Locked {
  std::unique_lock<std::mutex> lock;
  const std::vector<std::unique_ptr<Family>>& list;
};

Families& families() {
  static Families fs;
  static const bool builtins_added = [] {
    for (Family& f : builtin_families()) add(fs, std::move(f));
    return true;
  }();
  (void)builtins_added;
  return fs;
}

Locked locked() {
  Families& fs = families();
  return {std::unique_lock(fs.mutex), fs.list};
}

const Family* find(const std::vector<std::unique_ptr<Family>>& list, const std::string& type) {
  for (const auto& f : list)
    if (f->name == type) return f.get();
  return nullptr;
}

std::string names(const std::vector<std::unique_ptr<Family>>& list) {
  std::string out;
  for (const auto& f : list) out += (out.empty() ? "" : " | ") + f->name;
  return out;
}

// `f`'s declaration of its key `name`; null when it does not read it.
const FamilyKey* declared(const Family& f, const std::string& name) {
  for (const FamilyKey& k : f.keys)
    if (k.name == name) return &k;
  return nullptr;
}

}  // namespace

void register_family(Family family) {
  Families& fs = families();
  std::lock_guard lock(fs.mutex);
  add(fs, std::move(family));
}

void register_model(const std::string& type, ModelTask task, ModelBuilder build) {
  register_family({.name = type, .title = "", .task = task, .build = std::move(build)});
}

const Family& find_family(const std::string& type) {
  const Locked fs = locked();
  const Family* f = find(fs.list, type);
  TIDAL_CHECK(f != nullptr, "model.type = \"{}\" is not one of {} (a program of your own adds types with "
              "models::register_model)", type, names(fs.list));
  return *f;
}

std::string model_type_names() { return names(locked().list); }

std::vector<std::string> families_for(ModelTask task) {
  const Locked fs = locked();
  std::vector<std::string> out;
  for (const auto& f : fs.list)
    if (f->task == task) out.push_back(f->name);
  return out;
}

std::vector<std::string> families_reading(const std::string& key) {
  const Locked fs = locked();
  std::vector<std::string> out;
  for (const auto& f : fs.list)
    if (declared(*f, key)) out.push_back(f->name);
  return out;
}

std::vector<DeclaredKey> declared_keys() {
  const Locked fs = locked();
  std::vector<DeclaredKey> out;
  for (const auto& f : fs.list)
    for (const FamilyKey& k : f->keys) {
      auto it = std::find_if(out.begin(), out.end(), [&](const DeclaredKey& d) { return d.key.name == k.name; });
      if (it == out.end()) it = out.insert(out.end(), {.key = k, .readers = {}});
      it->readers.push_back(f->name);
    }
  return out;
}

std::size_t registered_families() { return locked().list.size(); }

KeyValue family_key(const ModelConfig& m, const std::string& name) {
  if (const auto it = m.family_keys.find(name); it != m.family_keys.end()) return it->second;
  const Locked fs = locked();
  if (const Family* mine = find(fs.list, m.type))
    if (const FamilyKey* k = declared(*mine, name)) return k->fallback;
  for (const auto& f : fs.list)
    if (const FamilyKey* k = declared(*f, name)) return k->fallback;
  TIDAL_ASSERT(false, "model.{} is no family's key", name);
  return {};
}

std::string hf_architecture_names() {
  const Locked fs = locked();
  std::string out;
  for (const auto& f : fs.list)
    if (f->hf) out += fmt::format("{}{} for {}", out.empty() ? "" : ", ", f->hf.model_type, f->hf.architecture);
  return out;
}

std::string generating_families() {
  const Locked fs = locked();
  std::vector<std::string> titles;
  for (const auto& f : fs.list)
    if (f->decoder) titles.push_back(f->title.empty() ? f->name : f->title);
  std::string out;
  for (std::size_t i = 0; i < titles.size(); ++i)
    out += (i == 0 ? "" : i + 1 == titles.size() ? " and " : ", ") + titles[i];
  return out;
}

std::vector<std::string> read_hf_config(const std::string& dir, ModelConfig& m) {
  const nlohmann::json j = io::read_hf_config_json(dir);
  const io::HfConfigKeys keys(j, (std::filesystem::path(dir) / "config.json").string());
  const std::string type = keys.get<std::string>("model_type", "");
  const Family* family = nullptr;
  {
    const Locked fs = locked();
    for (const auto& f : fs.list)
      if (f->hf && f->hf.model_type == type) family = f.get();
  }
  TIDAL_CHECK(family != nullptr, "{}: model_type \"{}\" is not an architecture tidal reads ({})", keys.file(), type,
              hf_architecture_names());
  m.type = family->name;
  std::vector<std::string> decided = family->hf.read(keys, m);
  decided.insert(decided.begin(), "model.type");
  return decided;
}

const HfAdapter& hf_adapter(const ModelConfig& m) {
  const Family& f = find_family(m.type);
  TIDAL_CHECK(bool(f.hf), "model.type = \"{}\" has no Hugging Face adapter: Hugging Face checkpoints "
              "(model.init_from, tidal export --format hf) are those of families that give one in their spec "
              "(models/registry.h)", m.type);
  return f.hf;
}

double norm_eps(const ModelConfig& m) { return m.ln_eps > 0 ? m.ln_eps : find_family(m.type).norm_eps; }

ModelTraits model_traits(const ModelConfig& m) {
  const Family& f = find_family(m.type);
  return f.traits ? f.traits(m) : ModelTraits{};
}

std::int64_t positions_per_sample(const ModelConfig& m) {
  if (find_family(m.type).task != ModelTask::image_classification) return m.seq_len;
  const ModelTraits t = model_traits(m);
  const std::int64_t side = t.image_size / t.patch_size;
  return side * side + 1;
}

}  // namespace tidal::models
