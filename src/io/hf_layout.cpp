#include "io/hf_layout.h"

#include <fmt/format.h>

namespace tidal::io {
namespace {

const char* base_prefix(HfFamily family) {
  switch (family) {
    case HfFamily::gpt2: return "transformer.";
    case HfFamily::bert: return "bert.";
    case HfFamily::vit: return "vit.";
    case HfFamily::llama: return "model.";
  }
  return "";
}

// Collects sources; `weight`/`bias` pairs of one layer come from one call.
class Sources {
 public:
  void add(std::string tidal, std::vector<std::string> hf, std::vector<Shape> shapes, bool transposed = false) {
    out_.push_back({std::move(tidal), std::move(hf), std::move(shapes), transposed});
  }
  void one(const std::string& tidal, const std::string& hf, Shape shape, bool transposed = false) {
    add(tidal, {hf}, {shape}, transposed);
  }
  // A Linear: tidal weight [out, in]; HF's nn.Linear the same, GPT-2's Conv1D [in, out].
  void linear(const std::string& tidal, const std::string& hf, std::int64_t in, std::int64_t out, bool conv1d) {
    one(tidal + ".weight", hf + ".weight", conv1d ? Shape{in, out} : Shape{out, in}, conv1d);
    one(tidal + ".bias", hf + ".bias", {out});
  }
  void layer_norm(const std::string& tidal, const std::string& hf, std::int64_t c) {
    one(tidal + ".weight", hf + ".weight", {c});
    one(tidal + ".bias", hf + ".bias", {c});
  }
  // BERT's and ViT's separate query, key and value as tidal's fused qkv (rows q | k | v).
  void qkv(const std::string& tidal, const std::string& hf, std::int64_t c) {
    add(tidal + ".weight", {hf + ".query.weight", hf + ".key.weight", hf + ".value.weight"}, {{c, c}, {c, c}, {c, c}});
    add(tidal + ".bias", {hf + ".query.bias", hf + ".key.bias", hf + ".value.bias"}, {{c}, {c}, {c}});
  }
  // Llama's q_proj, k_proj and v_proj as tidal's fused qkv, the query heads reordered.
  void grouped_qkv(const std::string& tidal, const std::string& hf, const HfModelSpec& s, const char* part,
                   std::int64_t per_head) {
    const std::int64_t hd = s.n_embd / s.n_head;
    const auto shape = [&](int heads) { return per_head ? Shape{heads * hd, per_head} : Shape{heads * hd}; };
    add(tidal + "." + part, {hf + "q_proj." + part, hf + "k_proj." + part, hf + "v_proj." + part},
        {shape(s.n_head), shape(s.n_kv_head), shape(s.n_kv_head)});
    out_.back().query_heads = s.n_head;
    out_.back().kv_heads = s.n_kv_head;
  }
  std::vector<HfTensorSource> take() { return std::move(out_); }

 private:
  std::vector<HfTensorSource> out_;
};

std::vector<HfTensorSource> gpt2(const HfModelSpec& s) {
  const std::int64_t C = s.n_embd;
  Sources src;
  src.one("wte.weight", "transformer.wte.weight", {s.vocab_size, C});
  src.one("wpe.weight", "transformer.wpe.weight", {s.max_positions, C});
  for (int i = 0; i < s.n_layer; ++i) {
    const std::string t = fmt::format("blocks.{}.", i), h = fmt::format("transformer.h.{}.", i);
    src.layer_norm(t + "ln_1", h + "ln_1", C);
    src.linear(t + "attn.qkv", h + "attn.c_attn", C, 3 * C, true);
    src.linear(t + "attn.proj", h + "attn.c_proj", C, C, true);
    src.layer_norm(t + "ln_2", h + "ln_2", C);
    src.linear(t + "mlp.fc", h + "mlp.c_fc", C, 4 * C, true);
    src.linear(t + "mlp.proj", h + "mlp.c_proj", 4 * C, C, true);
  }
  src.layer_norm("ln_f", "transformer.ln_f", C);
  if (!s.tie_embeddings) src.one("lm_head.weight", "lm_head.weight", {s.vocab_size, C});
  return src.take();
}

std::vector<HfTensorSource> bert(const HfModelSpec& s) {
  const std::int64_t C = s.n_embd;
  Sources src;
  src.one("embeddings.word.weight", "bert.embeddings.word_embeddings.weight", {s.vocab_size, C});
  src.one("embeddings.position.weight", "bert.embeddings.position_embeddings.weight", {s.max_positions, C});
  src.one("embeddings.token_type.weight", "bert.embeddings.token_type_embeddings.weight", {s.type_vocab_size, C});
  src.layer_norm("embeddings.ln", "bert.embeddings.LayerNorm", C);
  for (int i = 0; i < s.n_layer; ++i) {
    const std::string t = fmt::format("blocks.{}.", i), h = fmt::format("bert.encoder.layer.{}.", i);
    src.qkv(t + "attn.qkv", h + "attention.self", C);
    src.linear(t + "attn.proj", h + "attention.output.dense", C, C, false);
    src.layer_norm(t + "ln_1", h + "attention.output.LayerNorm", C);
    src.linear(t + "mlp.fc", h + "intermediate.dense", C, 4 * C, false);
    src.linear(t + "mlp.proj", h + "output.dense", 4 * C, C, false);
    src.layer_norm(t + "ln_2", h + "output.LayerNorm", C);
  }
  src.linear("mlm.dense", "cls.predictions.transform.dense", C, C, false);
  src.layer_norm("mlm.ln", "cls.predictions.transform.LayerNorm", C);
  if (!s.tie_embeddings) src.one("mlm.weight", "cls.predictions.decoder.weight", {s.vocab_size, C});
  src.one("mlm.bias", "cls.predictions.bias", {s.vocab_size});
  return src.take();
}

std::vector<HfTensorSource> vit(const HfModelSpec& s) {
  const std::int64_t C = s.n_embd, P = s.patch_size, n = (s.image_size / P) * (s.image_size / P);
  Sources src;
  src.one("patch.weight", "vit.embeddings.patch_embeddings.projection.weight", {C, s.channels, P, P});
  src.one("patch.bias", "vit.embeddings.patch_embeddings.projection.bias", {C});
  src.one("cls_token", "vit.embeddings.cls_token", {1, 1, C});
  src.one("pos_embed", "vit.embeddings.position_embeddings", {1, n + 1, C});
  for (int i = 0; i < s.n_layer; ++i) {
    const std::string t = fmt::format("blocks.{}.", i), h = fmt::format("vit.encoder.layer.{}.", i);
    src.layer_norm(t + "ln_1", h + "layernorm_before", C);
    src.qkv(t + "attn.qkv", h + "attention.attention", C);
    src.linear(t + "attn.proj", h + "attention.output.dense", C, C, false);
    src.layer_norm(t + "ln_2", h + "layernorm_after", C);
    src.linear(t + "mlp.fc", h + "intermediate.dense", C, 4 * C, false);
    src.linear(t + "mlp.proj", h + "output.dense", 4 * C, C, false);
  }
  src.layer_norm("ln_f", "vit.layernorm", C);
  src.linear("head", "classifier", C, s.num_classes, false);
  return src.take();
}

std::vector<HfTensorSource> llama(const HfModelSpec& s) {
  const std::int64_t C = s.n_embd, I = s.intermediate_size;
  Sources src;
  src.one("wte.weight", "model.embed_tokens.weight", {s.vocab_size, C});
  for (int i = 0; i < s.n_layer; ++i) {
    const std::string t = fmt::format("blocks.{}.", i), h = fmt::format("model.layers.{}.", i);
    src.one(t + "ln_1.weight", h + "input_layernorm.weight", {C});
    src.grouped_qkv(t + "attn.qkv", h + "self_attn.", s, "weight", C);
    if (s.attention_bias) src.grouped_qkv(t + "attn.qkv", h + "self_attn.", s, "bias", 0);
    src.one(t + "attn.proj.weight", h + "self_attn.o_proj.weight", {C, C});
    if (s.attention_bias) src.one(t + "attn.proj.bias", h + "self_attn.o_proj.bias", {C});
    src.one(t + "ln_2.weight", h + "post_attention_layernorm.weight", {C});
    src.add(t + "mlp.fc.weight", {h + "mlp.gate_proj.weight", h + "mlp.up_proj.weight"}, {{I, C}, {I, C}});
    src.one(t + "mlp.proj.weight", h + "mlp.down_proj.weight", {C, I});
  }
  src.one("ln_f.weight", "model.norm.weight", {C});
  if (!s.tie_embeddings) src.one("lm_head.weight", "lm_head.weight", {s.vocab_size, C});
  return src.take();
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

std::vector<HfTensorSource> hf_tensor_sources(const HfModelSpec& spec) {
  switch (spec.family) {
    case HfFamily::gpt2: return gpt2(spec);
    case HfFamily::bert: return bert(spec);
    case HfFamily::vit: return vit(spec);
    case HfFamily::llama: return llama(spec);
  }
  return {};
}

int tidal_query_head(int hf_head, int n_head, int n_kv_head) {
  const int g = n_head / n_kv_head;
  return (hf_head % g) * n_kv_head + hf_head / g;
}

std::string hf_canonical_name(HfFamily family, const std::string& name, const std::set<std::string>& known) {
  std::string n = name;
  // Checkpoints from before PyTorch named LayerNorm's parameters gamma and beta.
  if (ends_with(n, "LayerNorm.gamma")) n = n.substr(0, n.size() - 5) + "weight";
  if (ends_with(n, "LayerNorm.beta")) n = n.substr(0, n.size() - 4) + "bias";
  if (known.count(n)) return n;
  const std::string prefixed = base_prefix(family) + n;
  return known.count(prefixed) ? prefixed : n;
}

bool hf_ignored_on_load(HfFamily family, const std::string& n) {
  switch (family) {
    case HfFamily::gpt2: return ends_with(n, ".attn.bias") || ends_with(n, ".attn.masked_bias");
    case HfFamily::bert:
      return ends_with(n, "embeddings.position_ids") || n.starts_with("bert.pooler.") || n.starts_with("pooler.") ||
             n.starts_with("cls.seq_relationship.");
    case HfFamily::vit: return false;
    // Older Llama checkpoints saved the rotary embedding's inverse frequencies, a buffer.
    case HfFamily::llama: return ends_with(n, ".rotary_emb.inv_freq");
  }
  return false;
}

}  // namespace tidal::io
