#include "io/hf_config.h"

#include "core/error.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <limits>
#include <type_traits>
#include <utility>

namespace tidal::io {
namespace {

using nlohmann::json;

// One key of config.json with its type, the family's default when the file leaves it out.
class Keys {
 public:
  static constexpr std::int64_t kLargestSize = std::numeric_limits<std::int32_t>::max();

  Keys(const json& j, std::string file) : j_(j), file_(std::move(file)) {}

  template <class T>
  T get(const char* key, T fallback) const {
    if (!j_.contains(key) || j_[key].is_null()) return fallback;
    const json& v = j_[key];
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
    } catch (const json::exception&) {
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
    TIDAL_CHECK(v == expected, "{}: \"{}\" is {}; tidal builds {} only ({})", file_, key, json(v).dump(),
                json(expected).dump(), why);
  }
  bool gelu_erf(const char* key, const char* fallback) const {
    const std::string act = get<std::string>(key, fallback);
    if (act == "gelu") return true;
    if (act == "gelu_new" || act == "gelu_pytorch_tanh") return false;
    throw Error(fmt::format("{}: \"{}\" is \"{}\"; tidal's MLP computes \"gelu\" (erf) or \"gelu_new\" / "
                            "\"gelu_pytorch_tanh\" (tanh)", file_, key, act));
  }
  void require_mlp_width(const char* key, std::int64_t n_embd) const {
    const std::int64_t hidden = get<std::int64_t>(key, 4 * n_embd);
    TIDAL_CHECK(hidden == 4 * n_embd, "{}: \"{}\" is {}; tidal's MLP is 4 x the hidden size ({})", file_, key, hidden,
                4 * n_embd);
  }
  const std::string& file() const { return file_; }

 private:
  const json& j_;
  std::string file_;
};

HfModelSpec read_gpt2(const Keys& k) {
  HfModelSpec s;
  s.family = HfFamily::gpt2;
  s.n_layer = k.positive<int>("n_layer", 12);
  s.n_head = k.positive<int>("n_head", 12);
  s.n_embd = k.positive<std::int64_t>("n_embd", 768);
  s.vocab_size = k.positive<std::int64_t>("vocab_size", 50257);
  s.max_positions = k.positive<std::int64_t>("n_positions", 1024);
  s.ln_eps = k.get<double>("layer_norm_epsilon", 1e-5);
  s.gelu_erf = k.gelu_erf("activation_function", "gelu_new");
  s.tie_embeddings = k.get<bool>("tie_word_embeddings", true);
  k.require_mlp_width("n_inner", s.n_embd);
  k.require("scale_attn_weights", true, "attention scaled by 1/sqrt(head size)");
  k.require("scale_attn_by_inverse_layer_idx", false, "attention scaled by 1/sqrt(head size)");
  k.require("reorder_and_upcast_attn", false, "attention computed in fp32 accumulation anyway");
  k.require("add_cross_attention", false, "decoder-only blocks");
  return s;
}

HfModelSpec read_bert(const Keys& k) {
  HfModelSpec s;
  s.family = HfFamily::bert;
  s.n_layer = k.positive<int>("num_hidden_layers", 12);
  s.n_head = k.positive<int>("num_attention_heads", 12);
  s.n_embd = k.positive<std::int64_t>("hidden_size", 768);
  s.vocab_size = k.positive<std::int64_t>("vocab_size", 30522);
  s.max_positions = k.positive<std::int64_t>("max_position_embeddings", 512);
  s.type_vocab_size = k.positive<std::int64_t>("type_vocab_size", 2);
  s.ln_eps = k.get<double>("layer_norm_eps", 1e-12);
  s.gelu_erf = k.gelu_erf("hidden_act", "gelu");
  s.tie_embeddings = k.get<bool>("tie_word_embeddings", true);
  k.require_mlp_width("intermediate_size", s.n_embd);
  k.require<std::string>("position_embedding_type", "absolute", "learned absolute positions");
  k.require("is_decoder", false, "an encoder");
  return s;
}

HfModelSpec read_vit(const Keys& k, const json& j) {
  HfModelSpec s;
  s.family = HfFamily::vit;
  s.n_layer = k.positive<int>("num_hidden_layers", 12);
  s.n_head = k.positive<int>("num_attention_heads", 12);
  s.n_embd = k.positive<std::int64_t>("hidden_size", 768);
  s.ln_eps = k.get<double>("layer_norm_eps", 1e-12);
  s.gelu_erf = k.gelu_erf("hidden_act", "gelu");
  s.image_size = k.positive<std::int64_t>("image_size", 224);
  s.patch_size = k.positive<std::int64_t>("patch_size", 16);
  s.channels = k.positive<std::int64_t>("num_channels", 3);
  // transformers keeps the label count as id2label (default: two labels).
  s.num_classes = j.contains("id2label") && j["id2label"].is_object() ? std::int64_t(j["id2label"].size()) : 2;
  s.tie_embeddings = false;
  k.require_mlp_width("intermediate_size", s.n_embd);
  k.require("qkv_bias", true, "q, k and v with biases");
  return s;
}

// transformers' LlamaConfig defaults (4.40); rope_scaling as Llama 3.1 writes it.
HfModelSpec read_llama(const Keys& k, const json& j) {
  HfModelSpec s;
  s.family = HfFamily::llama;
  s.n_layer = k.positive<int>("num_hidden_layers", 32);
  s.n_head = k.positive<int>("num_attention_heads", 32);
  s.n_embd = k.positive<std::int64_t>("hidden_size", 4096);
  s.n_kv_head = k.positive<int>("num_key_value_heads", s.n_head);
  s.intermediate_size = k.positive<std::int64_t>("intermediate_size", 11008);
  s.vocab_size = k.positive<std::int64_t>("vocab_size", 32000);
  s.max_positions = k.positive<std::int64_t>("max_position_embeddings", 2048);
  s.ln_eps = k.get<double>("rms_norm_eps", 1e-6);
  s.tie_embeddings = k.get<bool>("tie_word_embeddings", false);
  s.rope_theta = k.get<double>("rope_theta", 10000.0);
  s.attention_bias = k.get<bool>("attention_bias", false);
  k.require<std::string>("hidden_act", "silu", "a SwiGLU MLP");
  k.require("mlp_bias", false, "an MLP without biases");
  const std::int64_t head_dim = k.get<std::int64_t>("head_dim", s.n_embd / s.n_head);
  TIDAL_CHECK(head_dim == s.n_embd / s.n_head && s.n_embd % s.n_head == 0, "{}: \"head_dim\" is {}; tidal's heads are hidden_size / "
              "num_attention_heads = {}", k.file(), head_dim, s.n_embd / s.n_head);
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    const json& r = j["rope_scaling"];
    const Keys rk(r, k.file() + " rope_scaling");
    const std::string type = rk.get<std::string>("rope_type", rk.get<std::string>("type", ""));
    TIDAL_CHECK(type == "llama3", "{}: rope_scaling type \"{}\"; tidal builds Llama 3's (\"llama3\") only",
                k.file(), type);
    s.rope_scaling_factor = rk.get<double>("factor", 8.0);
    s.rope_low_freq_factor = rk.get<double>("low_freq_factor", 1.0);
    s.rope_high_freq_factor = rk.get<double>("high_freq_factor", 4.0);
    s.rope_original_max_positions = rk.positive<std::int64_t>("original_max_position_embeddings", 8192);
  }
  return s;
}

}  // namespace

const char* hf_architecture(HfFamily family) {
  switch (family) {
    case HfFamily::gpt2: return "GPT2LMHeadModel";
    case HfFamily::bert: return "BertForMaskedLM";
    case HfFamily::vit: return "ViTForImageClassification";
    case HfFamily::llama: return "LlamaForCausalLM";
  }
  return "?";
}

HfModelSpec read_hf_config(const std::string& dir) {
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
  const Keys keys(j, file);
  const std::string type = keys.get<std::string>("model_type", "");
  if (type == "gpt2") return read_gpt2(keys);
  if (type == "bert") return read_bert(keys);
  if (type == "vit") return read_vit(keys, j);
  if (type == "llama") return read_llama(keys, j);
  throw Error(fmt::format("{}: model_type \"{}\" is not an architecture tidal reads (gpt2 for GPT2LMHeadModel, bert "
                          "for BertForMaskedLM, vit for ViTForImageClassification, llama for LlamaForCausalLM)",
                          file, type));
}

std::string hf_config_json(const HfModelSpec& s) {
  json j;
  j["architectures"] = {hf_architecture(s.family)};
  const char* act = s.gelu_erf ? "gelu" : "gelu_new";
  switch (s.family) {
    case HfFamily::gpt2:
      j.update({{"model_type", "gpt2"}, {"n_layer", s.n_layer}, {"n_head", s.n_head}, {"n_embd", s.n_embd},
                {"vocab_size", s.vocab_size}, {"n_positions", s.max_positions}, {"n_ctx", s.max_positions},
                {"n_inner", nullptr}, {"layer_norm_epsilon", s.ln_eps}, {"activation_function", act},
                {"tie_word_embeddings", s.tie_embeddings}, {"resid_pdrop", s.dropout}, {"embd_pdrop", s.dropout},
                {"attn_pdrop", 0.0}});
      break;
    case HfFamily::bert:
      j.update({{"model_type", "bert"}, {"num_hidden_layers", s.n_layer}, {"num_attention_heads", s.n_head},
                {"hidden_size", s.n_embd}, {"intermediate_size", 4 * s.n_embd}, {"vocab_size", s.vocab_size},
                {"max_position_embeddings", s.max_positions}, {"type_vocab_size", s.type_vocab_size},
                {"layer_norm_eps", s.ln_eps}, {"hidden_act", act}, {"position_embedding_type", "absolute"},
                {"tie_word_embeddings", s.tie_embeddings}, {"hidden_dropout_prob", s.dropout},
                {"attention_probs_dropout_prob", 0.0}});
      break;
    case HfFamily::vit: {
      json labels = json::object();
      for (std::int64_t i = 0; i < s.num_classes; ++i) labels[std::to_string(i)] = fmt::format("LABEL_{}", i);
      j.update({{"model_type", "vit"}, {"num_hidden_layers", s.n_layer}, {"num_attention_heads", s.n_head},
                {"hidden_size", s.n_embd}, {"intermediate_size", 4 * s.n_embd}, {"image_size", s.image_size},
                {"patch_size", s.patch_size}, {"num_channels", s.channels}, {"layer_norm_eps", s.ln_eps},
                {"hidden_act", act}, {"qkv_bias", true}, {"id2label", labels}, {"hidden_dropout_prob", s.dropout},
                {"attention_probs_dropout_prob", 0.0}});
      json ids = json::object();
      for (std::int64_t i = 0; i < s.num_classes; ++i) ids[fmt::format("LABEL_{}", i)] = i;
      j["label2id"] = ids;
      break;
    }
    case HfFamily::llama:
      j.update({{"model_type", "llama"}, {"num_hidden_layers", s.n_layer}, {"num_attention_heads", s.n_head},
                {"num_key_value_heads", s.n_kv_head ? s.n_kv_head : s.n_head}, {"hidden_size", s.n_embd},
                {"intermediate_size", s.intermediate_size}, {"vocab_size", s.vocab_size},
                {"max_position_embeddings", s.max_positions}, {"rms_norm_eps", s.ln_eps}, {"hidden_act", "silu"},
                {"rope_theta", s.rope_theta}, {"attention_bias", s.attention_bias}, {"attention_dropout", 0.0},
                {"tie_word_embeddings", s.tie_embeddings}, {"pretraining_tp", 1}});
      j["rope_scaling"] = nullptr;
      if (s.rope_scaling_factor > 0)
        j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", s.rope_scaling_factor},
                             {"low_freq_factor", s.rope_low_freq_factor}, {"high_freq_factor", s.rope_high_freq_factor},
                             {"original_max_position_embeddings", s.rope_original_max_positions}};
      break;
  }
  j["torch_dtype"] = "float32";
  j["transformers_version"] = "4.40.2";
  return j.dump(2) + "\n";
}

}  // namespace tidal::io
