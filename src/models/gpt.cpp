#include "models/gpt.h"

#include "nn/cross_entropy_loss.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/layernorm.h"
#include "nn/lm_head.h"
#include "nn/transformer_block.h"

#include <cmath>

namespace tidal::models {
namespace {

// Token + position embedding, then dropout.
class GptEmbedding final : public nn::Module {
 public:
  GptEmbedding(const GptConfig& c)
      : wte_(&add_module("wte", std::make_unique<nn::Embedding>(c.vocab_size, c.n_embd, nn::ParameterInit::normal(c.init_std)))),
        wpe_(&add_module("wpe", std::make_unique<nn::PositionEmbedding>(c.seq_len, c.n_embd, nn::ParameterInit::normal(c.init_std)))),
        drop_(&add_module("drop", std::make_unique<nn::Dropout>(c.dropout))) {}

  Tensor forward(const Tensor& tokens, nn::Context& ctx) override {
    return ctx.forward(*drop_, ctx.forward(*wpe_, ctx.forward(*wte_, tokens, 0), 1), 2);
  }
  Tensor backward(const Tensor& dy, nn::Context& ctx) override {
    return ctx.backward(*wte_, ctx.backward(*wpe_, ctx.backward(*drop_, dy, 2), 1), 0);
  }
  nn::Parameter& token_table() { return wte_->table(); }

 private:
  nn::Embedding* wte_;
  nn::PositionEmbedding* wpe_;
  nn::Dropout* drop_;
};

class Gpt final : public Model {
 public:
  explicit Gpt(const GptConfig& c) {
    auto& emb = add_layer("", std::make_unique<GptEmbedding>(c));
    nn::BlockConfig b{.n_embd = c.n_embd, .n_head = c.n_head, .causal = true, .pre_ln = true, .ln_eps = c.ln_eps,
                      .dropout = c.dropout, .init = nn::ParameterInit::normal(c.init_std),
                      // GPT-2 scales the residual projections by 1/sqrt(2 * n_layer).
                      .proj_init = nn::ParameterInit::normal(c.init_std / std::sqrt(2.0f * float(c.n_layer)))};
    add_blocks(c.n_layer, [&] { return std::make_unique<nn::TransformerBlock>(b); }, c.checkpointing);
    add_layer("ln_f", std::make_unique<nn::LayerNorm>(c.n_embd, c.ln_eps));
    add_layer("lm_head", std::make_unique<nn::TiedLmHead>(emb.token_table(), false));
    add_layer("loss", std::make_unique<nn::CrossEntropyLoss>());
  }
  const Tensor& input(const nn::Batch& batch) const override { return batch.tokens; }
};

}  // namespace

std::unique_ptr<Model> make_gpt(const GptConfig& cfg) { return std::make_unique<Gpt>(cfg); }

}  // namespace tidal::models
