// A family's own [model] keys (model.n_kv_head, model.experts, model.image_size, ...), declared in
// the family's folder as a table over the typed options they fill (models/llama/family.h's
// LlamaKeys, ...) and carried in ModelConfig::family_keys by name. The config's schema shows every
// registered family's keys in one table and checks a value's type against the declaration
// (config/schema.cpp); the family reads its options back with KeyTable::read.
#pragma once

#include "core/error.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace tidal::models {

// A key's value as a TOML file writes it: an integer, a number, a string or true / false.
using KeyValue = std::variant<std::int64_t, double, std::string, bool>;
// The family keys a config gives, by name without "model."; a key not here has its default.
using KeyValues = std::map<std::string, KeyValue>;

// A key as the schema shows it and checks what a config gives for it.
struct FamilyKey {
  std::string name;                // "n_kv_head" (model.n_kv_head)
  KeyValue fallback;               // its value when not given, whose type is the key's
  std::string help;
  std::int64_t least = 0;          // an integer's least value
  std::vector<std::string> names{};  // a string key's values (empty: any string)
};

// The keys of one options struct, each at a member of it (or of a base of it).
template <class Options>
class KeyTable {
 public:
  // A key of an integer, floating-point, bool or string member; an integer's least value `least`.
  template <class M, class C>
  KeyTable& add(std::string name, M C::*member, std::string help, std::int64_t least = 0) {
    static_assert(std::is_base_of_v<C, Options>);
    M Options::*at = member;
    entries_.push_back({.key = {.name = std::move(name), .fallback = stored(Options{}.*at), .help = std::move(help),
                                .least = least},
                        .set = [at](Options& o, const KeyValue& v) { o.*at = loaded<M>(v); },
                        .get = [at](const Options& o) { return stored(o.*at); }});
    return *this;
  }
  // A key of an enum member, given by its names.
  template <class E, class C>
  KeyTable& add(std::string name, E C::*member, std::vector<std::pair<E, std::string>> names, std::string help) {
    static_assert(std::is_base_of_v<C, Options> && std::is_enum_v<E>);
    E Options::*at = member;
    auto name_of = [names](E e) {
      for (const auto& [value, n] : names)
        if (value == e) return n;
      TIDAL_ASSERT(false, "an enum value without a name");
      return std::string();
    };
    Entry e{.key = {.name = std::move(name), .fallback = name_of(Options{}.*at), .help = std::move(help)}};
    for (const auto& n : names) e.key.names.push_back(n.second);
    e.set = [at, names](Options& o, const KeyValue& v) {
      for (const auto& [value, n] : names)
        if (n == std::get<std::string>(v)) o.*at = value;
    };
    e.get = [at, name_of](const Options& o) { return KeyValue(name_of(o.*at)); };
    entries_.push_back(std::move(e));
    return *this;
  }
  // Every key of `base`'s table, whose options are a base of these.
  template <class Base>
  KeyTable& add_all(const KeyTable<Base>& base) {
    static_assert(std::is_base_of_v<Base, Options>);
    for (const auto& b : base.entries_)
      entries_.push_back({.key = b.key,
                          .set = [set = b.set](Options& o, const KeyValue& v) { set(static_cast<Base&>(o), v); },
                          .get = [get = b.get](const Options& o) { return get(static_cast<const Base&>(o)); }});
    return *this;
  }

  // The options `given` sets, each key not given at its default.
  Options read(const KeyValues& given) const {
    Options o{};
    for (const Entry& e : entries_)
      if (const auto it = given.find(e.key.name); it != given.end()) {
        TIDAL_CHECK(it->second.index() == e.key.fallback.index(), "model.{} is given a value of another type",
                    e.key.name);
        e.set(o, it->second);
      }
    return o;
  }
  // Every key of `o` into `given` (a Hugging Face config.json's reading); returns their names
  // ("model.n_kv_head", ...).
  std::vector<std::string> write(const Options& o, KeyValues& given) const {
    std::vector<std::string> written;
    for (const Entry& e : entries_) {
      given[e.key.name] = e.get(o);
      written.push_back("model." + e.key.name);
    }
    return written;
  }
  // The keys as the schema shows them.
  std::vector<FamilyKey> keys() const {
    std::vector<FamilyKey> out;
    for (const Entry& e : entries_) out.push_back(e.key);
    return out;
  }
  // The table of these keys alone (a family that reads some of a shared struct's keys).
  KeyTable only(const std::vector<std::string>& names) const {
    KeyTable t;
    for (const Entry& e : entries_)
      if (std::find(names.begin(), names.end(), e.key.name) != names.end()) t.entries_.push_back(e);
    TIDAL_ASSERT(t.entries_.size() == names.size(), "a family names a key its table does not have");
    return t;
  }

 private:
  template <class>
  friend class KeyTable;
  struct Entry {
    FamilyKey key;
    std::function<void(Options&, const KeyValue&)> set{};
    std::function<KeyValue(const Options&)> get{};
  };

  template <class M>
  static KeyValue stored(const M& m) {
    if constexpr (std::is_same_v<M, bool> || std::is_same_v<M, std::string>) return m;
    else if constexpr (std::is_floating_point_v<M>) return double(m);
    else return std::int64_t(m);
  }
  template <class M>
  static M loaded(const KeyValue& v) {
    if constexpr (std::is_same_v<M, bool> || std::is_same_v<M, std::string>) return std::get<M>(v);
    else if constexpr (std::is_floating_point_v<M>) return M(std::get<double>(v));
    else return M(std::get<std::int64_t>(v));
  }

  std::vector<Entry> entries_;
};

}  // namespace tidal::models
