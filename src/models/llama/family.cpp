#include "models/llama/family.h"

#include "models/llama/decoder.h"
#include "models/llama/hf.h"

namespace tidal::models {
namespace {

void validate(const ModelConfig& m) {
  const LlamaKeys k = llama_keys(m);
  const int kv = k.n_kv_head ? k.n_kv_head : m.n_head;
  TIDAL_CHECK(kv <= m.n_head && m.n_head % kv == 0,
              "model.n_kv_head ({}) must divide model.n_head ({}): each key / value head serves an equal group of "
              "query heads (0 = n_head, 1 = multi-query attention)",
              k.n_kv_head, m.n_head);
  TIDAL_CHECK((m.n_embd / m.n_head) % 2 == 0,
              "rotary embeddings rotate pairs of features: the head size model.n_embd / model.n_head = {} must be even",
              m.n_embd / m.n_head);
  TIDAL_CHECK(k.rope_theta > 1, "model.rope_theta must be > 1 (Llama 2: 10000, Llama 3: 500000), got {}",
              k.rope_theta);
  TIDAL_CHECK(k.rope_scaling_factor == 0 ||
                  (k.rope_scaling_factor >= 1 && k.rope_high_freq_factor > k.rope_low_freq_factor &&
                   k.rope_original_max_positions > 0),
              "model.rope_scaling_factor ({}) must be 0 (none) or >= 1, with model.rope_high_freq_factor ({}) > "
              "model.rope_low_freq_factor ({}) and model.rope_original_max_positions > 0",
              k.rope_scaling_factor, k.rope_high_freq_factor, k.rope_low_freq_factor);
}

}  // namespace

const KeyTable<LlamaKeys>& llama_key_table() {
  static const KeyTable<LlamaKeys> table =
      KeyTable<LlamaKeys>()
          .add("max_positions", &LlamaKeys::max_positions, "the context")
          .add("tie_embeddings", &LlamaKeys::tie_embeddings, "the LM head reads the token embedding's table")
          .add("n_kv_head", &LlamaKeys::n_kv_head,
               "key / value heads of grouped-query attention (must divide n_head; 1 = multi-query); 0 = n_head")
          .add("intermediate_size", &LlamaKeys::intermediate_size,
               "the SwiGLU MLP's width; 0 = Llama's 8 n_embd / 3 rounded up to 256")
          .add("rope_theta", &LlamaKeys::rope_theta,
               "the rotary embeddings' frequency base (Llama 2: 10000, Llama 3: 500000)")
          .add("rope_scaling_factor", &LlamaKeys::rope_scaling_factor,
               "Llama 3's rotary frequency scaling factor (Llama 3.1: 8); 0 = no scaling")
          .add("rope_low_freq_factor", &LlamaKeys::rope_low_freq_factor,
               "rotary scaling's low_freq_factor (Llama 3.1: 1)")
          .add("rope_high_freq_factor", &LlamaKeys::rope_high_freq_factor,
               "rotary scaling's high_freq_factor (Llama 3.1: 4)")
          .add("rope_original_max_positions", &LlamaKeys::rope_original_max_positions,
               "rotary scaling's original_max_position_embeddings (Llama 3.1: 8192)")
          .add("attention_bias", &LlamaKeys::attention_bias,
               "biases on the attention's q, k, v and output projections");
  return table;
}

LlamaKeys llama_keys(const ModelConfig& m) { return llama_key_table().read(m.family_keys); }

std::int64_t llama_intermediate_size(const ModelConfig& m) {
  const std::int64_t width = llama_keys(m).intermediate_size;
  if (width > 0) return width;
  return (2 * (4 * m.n_embd) / 3 + 255) / 256 * 256;
}

std::int64_t llama_context(const ModelConfig& m) {
  const std::int64_t max_positions = llama_keys(m).max_positions;
  return max_positions ? max_positions : m.seq_len;
}

LlamaConfig llama_config(const ModelConfig& c, const nn::CheckpointPolicy& checkpointing, bool embedding_on_host) {
  const LlamaKeys k = llama_keys(c);
  return {.n_layer = c.n_layer, .n_head = c.n_head, .n_kv_head = k.n_kv_head, .n_embd = c.n_embd,
          .intermediate_size = llama_intermediate_size(c), .vocab_size = c.vocab_size,
          .rms_eps = float(norm_eps(c)),
          .rotary = {.theta = k.rope_theta,
                     .scaling = {.factor = float(k.rope_scaling_factor), .low_freq_factor = float(k.rope_low_freq_factor),
                                 .high_freq_factor = float(k.rope_high_freq_factor),
                                 .original_max_positions = k.rope_original_max_positions}},
          .qkv_bias = k.attention_bias, .proj_bias = k.attention_bias, .dropout = float(c.dropout),
          .checkpointing = checkpointing,
          .tie_embeddings = k.tie_embeddings, .embedding_on_host = embedding_on_host};
}

ModelTraits llama_traits(const ModelConfig& m) {
  const LlamaKeys k = llama_keys(m);
  return {.n_kv_head = k.n_kv_head, .positions = k.max_positions, .tied_head = k.tie_embeddings};
}

Family llama_family() {
  return {.name = "llama",
          .title = "Llama",
          .task = ModelTask::causal_lm,
          .keys = llama_key_table().keys(),
          .build = [](const ModelBuild& b) {
            return make_llama(llama_config(b.config, b.checkpointing, b.embedding_on_host), b.layers);
          },
          .decoder = [](Model& model, const ModelConfig& c) -> std::unique_ptr<Decoder> {
            return std::make_unique<LlamaDecoder>(model, llama_config(c), llama_context(c));
          },
          .norm_eps = 1e-6,
          .validate = validate,
          .traits = llama_traits,
          .hf = llama_hf_adapter()};
}

}  // namespace tidal::models
