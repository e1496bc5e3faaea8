#include "io/hf_config.h"

#include <filesystem>
#include <fstream>

namespace tidal::io {

using nlohmann::json;

bool HfConfigKeys::gelu_erf(const char* key, const char* fallback) const {
  const std::string act = get<std::string>(key, fallback);
  if (act == "gelu") return true;
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") return false;
  throw Error(fmt::format("{}: \"{}\" is \"{}\"; tidal's MLP computes \"gelu\" (erf) or \"gelu_new\" / "
                          "\"gelu_pytorch_tanh\" (tanh)", file_, key, act));
}

void HfConfigKeys::require_mlp_width(const char* key, std::int64_t n_embd) const {
  const std::int64_t hidden = get<std::int64_t>(key, 4 * n_embd);
  TIDAL_CHECK(hidden == 4 * n_embd, "{}: \"{}\" is {}; tidal's MLP is 4 x the hidden size ({})", file_, key, hidden,
              4 * n_embd);
}

HfConfigKeys HfConfigKeys::object(const char* key) const {
  TIDAL_CHECK(j_[key].is_object(), "{}: \"{}\" is {}; transformers writes an object there", file_, key,
              j_[key].dump());
  return HfConfigKeys(j_[key], file_ + " " + key);
}

json read_hf_config_json(const std::string& dir) {
  const std::string file = (std::filesystem::path(dir) / "config.json").string();
  TIDAL_CHECK(std::filesystem::is_directory(dir), "model.init_from = \"{}\" is not a directory (a Hugging Face model "
              "directory holds config.json and model.safetensors)", dir);
  std::ifstream in(file);
  TIDAL_CHECK(in.good(), "model.init_from: '{}' is missing (a Hugging Face model directory holds config.json and "
              "model.safetensors)", file);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: malformed JSON: {}", file, e.what()));
  }
  TIDAL_CHECK(j.is_object(), "{}: not a JSON object", file);
  return j;
}

std::string hf_config_text(json keys, const std::string& architecture) {
  keys["architectures"] = {architecture};
  keys["torch_dtype"] = "float32";
  keys["transformers_version"] = "4.40.2";
  return keys.dump(2) + "\n";
}

}  // namespace tidal::io
