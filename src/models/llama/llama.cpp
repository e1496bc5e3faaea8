#include "models/llama/llama.h"

#include "nn/transformer_block.h"

namespace tidal::models {
namespace {

// The token embedding alone: positions enter as rotations inside attention.
class TokenEmbedding final : public nn::Module {
 public:
  TokenEmbedding(const LlamaConfig& c, nn::LayerFactory& layers)
      : wte_(&add_module("wte", layers.vocab_embedding(c.vocab_size, c.n_embd, nn::ParameterInit::normal(c.init_std)))) {}

  Tensor forward(const Tensor& tokens, nn::Context& ctx) override { return ctx.forward(*wte_, tokens, 0); }
  Tensor backward(const Tensor& dy, nn::Context& ctx) override { return ctx.backward(*wte_, dy, 0); }
  nn::TableLookup& table() { return *wte_; }

 private:
  nn::TableLookup* wte_;
};

class Llama final : public Model {
 public:
  Llama(const LlamaConfig& c, nn::LayerFactory& layers) {
    auto embedding = std::make_unique<TokenEmbedding>(c, layers);
    nn::TableLookup& wte = embedding->table();
    add_embedding_layer("", std::move(embedding), c.embedding_on_host);
    const nn::ParameterInit init = nn::ParameterInit::normal(c.init_std);
    const nn::BlockConfig b{
        .n_embd = c.n_embd,
        .attention = {.n_head = c.n_head,
                      .n_kv_head = c.n_kv_head,
                      .causal = true,
                      .bias = c.qkv_bias,
                      .proj_bias = c.proj_bias,
                      .rotary = c.rotary,
                      .recompute_qkv = c.checkpointing.selective},
        .mlp = {.kind = nn::MlpConfig::Kind::swiglu,
                .hidden = c.intermediate_size,
                .bias = false,
                .recompute_activation = c.checkpointing.selective},
        .moe = c.moe,
        .norm = nn::NormKind::rms_norm,
        .norm_eps = c.rms_eps,
        .pre_norm = true,
        .dropout = c.dropout,
        .init = init,
        .proj_init = init};
    int layer = 0;
    add_blocks(c.n_layer, [&] {
      nn::BlockConfig block = b;
      block.moe.layer = layer++;
      block.moe.moe_layers = c.n_layer;
      block.moe.recompute_activation = c.checkpointing.selective;
      return std::make_unique<nn::TransformerBlock>(block, layers);
    }, c.checkpointing);
    add_layer("ln_f", layers.rms_norm(c.n_embd, c.rms_eps));
    add_head_and_loss("lm_head",
                      c.tie_embeddings ? layers.tied_head(wte, false)
                                       : layers.untied_head(c.vocab_size, c.n_embd, init, false),
                      layers.cross_entropy(c.vocab_size), c.checkpointing);
  }
  const Tensor& input(const nn::Batch& batch) const override { return batch.tokens; }
};

}  // namespace

std::unique_ptr<Model> make_llama(const LlamaConfig& cfg, nn::LayerFactory& layers) {
  return std::make_unique<Llama>(cfg, layers);
}

}  // namespace tidal::models
