#include "models/gpt/gpt.h"

#include "nn/transformer_block.h"

#include <cmath>

namespace tidal::models {
namespace {

// Token + position embedding, then dropout.
class GptEmbedding final : public nn::Module {
 public:
  GptEmbedding(const GptConfig& c, nn::LayerFactory& layers)
      : wte_(&add_module("wte", layers.vocab_embedding(c.vocab_size, c.n_embd, nn::ParameterInit::normal(c.init_std)))),
        wpe_(&add_module("wpe", layers.position_embedding(c.max_positions ? c.max_positions : c.seq_len, c.n_embd, nn::ParameterInit::normal(c.init_std)))),
        drop_(&add_module("drop", layers.dropout(c.dropout))) {}

  Tensor forward(const Tensor& tokens, nn::Context& ctx) override {
    return ctx.forward(*drop_, ctx.forward(*wpe_, ctx.forward(*wte_, tokens, 0), 1), 2);
  }
  Tensor backward(const Tensor& dy, nn::Context& ctx) override {
    return ctx.backward(*wte_, ctx.backward(*wpe_, ctx.backward(*drop_, dy, 2), 1), 0);
  }
  nn::TableLookup& token_embedding() { return *wte_; }

 private:
  nn::TableLookup* wte_;
  nn::Module* wpe_;
  nn::Module* drop_;
};

class Gpt final : public Model {
 public:
  Gpt(const GptConfig& c, nn::LayerFactory& layers) {
    auto embedding = std::make_unique<GptEmbedding>(c, layers);
    nn::TableLookup& wte = embedding->token_embedding();
    add_embedding_layer("", std::move(embedding), c.embedding_on_host);
    nn::BlockConfig b{.n_embd = c.n_embd,
                      .attention = {.n_head = c.n_head, .causal = true, .recompute_qkv = c.checkpointing.selective},
                      .mlp = {.activation = c.activation, .recompute_activation = c.checkpointing.selective},
                      .norm_eps = c.ln_eps,
                      .dropout = c.dropout,
                      .init = nn::ParameterInit::normal(c.init_std),
                      // GPT-2 scales the residual projections by 1/sqrt(2 * n_layer).
                      .proj_init = nn::ParameterInit::normal(c.init_std / std::sqrt(2.0f * float(c.n_layer)))};
    add_blocks(c.n_layer, [&] { return std::make_unique<nn::TransformerBlock>(b, layers); }, c.checkpointing);
    add_layer("ln_f", layers.layer_norm(c.n_embd, c.ln_eps));
    add_head_and_loss("lm_head",
                      c.tie_embeddings
                          ? layers.tied_head(wte, false)
                          : layers.untied_head(c.vocab_size, c.n_embd, nn::ParameterInit::normal(c.init_std), false),
                      layers.cross_entropy(c.vocab_size), c.checkpointing);
  }
  const Tensor& input(const nn::Batch& batch) const override { return batch.tokens; }
};

}  // namespace

std::unique_ptr<Model> make_gpt(const GptConfig& cfg, nn::LayerFactory& layers) {
  return std::make_unique<Gpt>(cfg, layers);
}

}  // namespace tidal::models
