#include "io/hf_layout.h"

namespace tidal::io {

void HfTensorSources::add(std::string tidal, std::vector<std::string> hf, std::vector<Shape> shapes, bool transposed) {
  out_.push_back({std::move(tidal), std::move(hf), std::move(shapes), transposed});
}

void HfTensorSources::one(const std::string& tidal, const std::string& hf, Shape shape, bool transposed) {
  add(tidal, {hf}, {shape}, transposed);
}

void HfTensorSources::linear(const std::string& tidal, const std::string& hf, std::int64_t in, std::int64_t out,
                             bool conv1d) {
  one(tidal + ".weight", hf + ".weight", conv1d ? Shape{in, out} : Shape{out, in}, conv1d);
  one(tidal + ".bias", hf + ".bias", {out});
}

void HfTensorSources::layer_norm(const std::string& tidal, const std::string& hf, std::int64_t c) {
  one(tidal + ".weight", hf + ".weight", {c});
  one(tidal + ".bias", hf + ".bias", {c});
}

void HfTensorSources::qkv(const std::string& tidal, const std::string& hf, std::int64_t c) {
  add(tidal + ".weight", {hf + ".query.weight", hf + ".key.weight", hf + ".value.weight"}, {{c, c}, {c, c}, {c, c}});
  add(tidal + ".bias", {hf + ".query.bias", hf + ".key.bias", hf + ".value.bias"}, {{c}, {c}, {c}});
}

void HfTensorSources::grouped_qkv(const std::string& tidal, const std::string& hf, int n_head, int n_kv_head,
                                  std::int64_t head_dim, const char* part, std::int64_t per_head) {
  const auto shape = [&](int heads) { return per_head ? Shape{heads * head_dim, per_head} : Shape{heads * head_dim}; };
  add(tidal + "." + part, {hf + "q_proj." + part, hf + "k_proj." + part, hf + "v_proj." + part},
      {shape(n_head), shape(n_kv_head), shape(n_kv_head)});
  out_.back().query_heads = n_head;
  out_.back().kv_heads = n_kv_head;
}

int tidal_query_head(int hf_head, int n_head, int n_kv_head) {
  const int g = n_head / n_kv_head;
  return (hf_head % g) * n_kv_head + hf_head / g;
}

std::string hf_canonical_name(const std::string& base_prefix, const std::string& name,
                              const std::set<std::string>& known) {
  std::string n = name;
  // Checkpoints from before PyTorch named LayerNorm's parameters gamma and beta.
  if (n.ends_with("LayerNorm.gamma")) n = n.substr(0, n.size() - 5) + "weight";
  if (n.ends_with("LayerNorm.beta")) n = n.substr(0, n.size() - 4) + "bias";
  if (known.count(n)) return n;
  const std::string prefixed = base_prefix + n;
  return known.count(prefixed) ? prefixed : n;
}

}  // namespace tidal::io
