#include "models/llama/family.h"

#include "models/llama/decoder.h"
#include "models/llama/hf.h"

namespace tidal::models {
namespace {

void validate(const ModelConfig& m) {
  const int kv = m.n_kv_head ? m.n_kv_head : m.n_head;
  TIDAL_CHECK(m.n_kv_head >= 0 && kv <= m.n_head && m.n_head % kv == 0,
              "model.n_kv_head ({}) must divide model.n_head ({}): each key / value head serves an equal group of "
              "query heads (0 = n_head, 1 = multi-query attention)",
              m.n_kv_head, m.n_head);
  TIDAL_CHECK((m.n_embd / m.n_head) % 2 == 0,
              "rotary embeddings rotate pairs of features: the head size model.n_embd / model.n_head = {} must be even",
              m.n_embd / m.n_head);
  TIDAL_CHECK(m.intermediate_size >= 0, "model.intermediate_size must be >= 0 (0 = Llama's own), got {}",
              m.intermediate_size);
  TIDAL_CHECK(m.rope_theta > 1, "model.rope_theta must be > 1 (Llama 2: 10000, Llama 3: 500000), got {}",
              m.rope_theta);
  TIDAL_CHECK(m.rope_scaling_factor == 0 ||
                  (m.rope_scaling_factor >= 1 && m.rope_high_freq_factor > m.rope_low_freq_factor &&
                   m.rope_original_max_positions > 0),
              "model.rope_scaling_factor ({}) must be 0 (none) or >= 1, with model.rope_high_freq_factor ({}) > "
              "model.rope_low_freq_factor ({}) and model.rope_original_max_positions > 0",
              m.rope_scaling_factor, m.rope_high_freq_factor, m.rope_low_freq_factor);
}

}  // namespace

std::int64_t llama_intermediate_size(const ModelConfig& m) {
  if (m.intermediate_size > 0) return m.intermediate_size;
  return (2 * (4 * m.n_embd) / 3 + 255) / 256 * 256;
}

LlamaConfig llama_config(const ModelConfig& c, const nn::CheckpointPolicy& checkpointing, bool embedding_on_host) {
  return {.n_layer = c.n_layer, .n_head = c.n_head, .n_kv_head = c.n_kv_head, .n_embd = c.n_embd,
          .intermediate_size = llama_intermediate_size(c), .vocab_size = c.vocab_size,
          .rms_eps = float(norm_eps(c)),
          .rotary = {.theta = c.rope_theta,
                     .scaling = {.factor = float(c.rope_scaling_factor), .low_freq_factor = float(c.rope_low_freq_factor),
                                 .high_freq_factor = float(c.rope_high_freq_factor),
                                 .original_max_positions = c.rope_original_max_positions}},
          .qkv_bias = c.attention_bias, .proj_bias = c.attention_bias, .dropout = float(c.dropout),
          .checkpointing = checkpointing,
          .tie_embeddings = c.tie_embeddings, .embedding_on_host = embedding_on_host};
}

Family llama_family() {
  return {.name = "llama",
          .title = "Llama",
          .task = ModelTask::causal_lm,
          .keys = {"max_positions", "tie_embeddings", "n_kv_head", "intermediate_size", "rope_theta",
                   "rope_scaling_factor", "rope_low_freq_factor", "rope_high_freq_factor",
                   "rope_original_max_positions", "attention_bias"},
          .build = [](const ModelBuild& b) {
            return make_llama(llama_config(b.config, b.checkpointing, b.embedding_on_host), b.layers);
          },
          // The context: model.max_positions, else the training sequence's length.
          .decoder = [](Model& model, const ModelConfig& c) -> std::unique_ptr<Decoder> {
            const std::int64_t context = c.max_positions ? c.max_positions : c.seq_len;
            return std::make_unique<LlamaDecoder>(model, llama_config(c), context);
          },
          .norm_eps = 1e-6,
          // Llama's LM head has a table of its own (Hugging Face's tie_word_embeddings = false).
          .tie_embeddings = false,
          .validate = validate,
          .hf = llama_hf_adapter()};
}

}  // namespace tidal::models
