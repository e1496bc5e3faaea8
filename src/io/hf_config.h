// A Hugging Face model directory's config.json, read as `transformers` reads it: each key with
// its type, and the config class's default where the file leaves it out (save_pretrained omits
// keys at their defaults); a value tidal's model cannot express is an error naming the file and
// the key. Which keys an architecture has is its family's to say (models/<family>/hf.cpp).
#pragma once

#include "core/error.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

namespace tidal::io {

class HfConfigKeys {
 public:
  static constexpr std::int64_t kLargestSize = std::numeric_limits<std::int32_t>::max();

  // `j` must outlive the keys; `file` names it in errors.
  HfConfigKeys(const nlohmann::json& j, std::string file) : j_(j), file_(std::move(file)) {}

  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  // The value of `key`, or `fallback` when the file leaves it out.
  template <class T>
  T get(const char* key, T fallback) const {
    if (!has(key)) return fallback;
    const nlohmann::json& v = j_[key];
    // A whole number must be written as one and fit T: nlohmann would cast 3e54 to int, which is undefined.
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      const bool fits = v.is_number_integer() &&
                        (v.is_number_unsigned() ? v.get<std::uint64_t>() <= std::uint64_t(std::numeric_limits<T>::max())
                                                : std::in_range<T>(v.get<std::int64_t>()));
      TIDAL_CHECK(fits, "{}: \"{}\" is {}; transformers writes a whole number there, and tidal reads it up to {}",
                  file_, key, v.dump(), std::numeric_limits<T>::max());
      return v.is_number_unsigned() ? T(v.get<std::uint64_t>()) : T(v.get<std::int64_t>());
    }
    try {
      return v.get<T>();
    } catch (const nlohmann::json::exception&) {
      throw Error(fmt::format("{}: \"{}\" is {}, which is not the type transformers writes there", file_, key,
                              v.dump()));
    }
  }
  // A size or count: a whole number above zero and below 2^31, so sizes multiply without overflow.
  template <class T>
  T positive(const char* key, T fallback) const {
    const T v = get<T>(key, fallback);
    TIDAL_CHECK(v > 0 && v <= kLargestSize, "{}: \"{}\" is {}; it must be a whole number from 1 to {}", file_, key,
                v, kLargestSize);
    return v;
  }
  // A key whose only value tidal builds is `expected`.
  template <class T>
  void require(const char* key, T expected, const char* why) const {
    const T v = get<T>(key, expected);
    TIDAL_CHECK(v == expected, "{}: \"{}\" is {}; tidal builds {} only ({})", file_, key, nlohmann::json(v).dump(),
                nlohmann::json(expected).dump(), why);
  }
  // An MLP's GELU: true for "gelu" (erf), false for "gelu_new" / "gelu_pytorch_tanh" (tanh).
  bool gelu_erf(const char* key, const char* fallback) const;
  // An MLP of 4 x the hidden size `n_embd`, the only width tidal's GELU MLP has.
  void require_mlp_width(const char* key, std::int64_t n_embd) const;
  // The object under `key` (as rope_scaling), its keys named "file key" in errors.
  HfConfigKeys object(const char* key) const;
  const nlohmann::json& json() const { return j_; }
  const std::string& file() const { return file_; }

 private:
  const nlohmann::json& j_;
  std::string file_;
};

// dir/config.json as a JSON object (model.init_from names the directory in errors: missing,
// malformed, not an object).
nlohmann::json read_hf_config_json(const std::string& dir);
// config.json's text for an exported model: an architecture's keys (model_type, sizes, ...) with
// architectures = [architecture], torch_dtype and the transformers version written beside them.
std::string hf_config_text(nlohmann::json keys, const std::string& architecture);

}  // namespace tidal::io
