#include "models/bert/bert.h"

#include "nn/gelu.h"
#include "nn/transformer_block.h"
#include "ops/residual.h"

namespace tidal::models {
namespace {

class BertEmbeddings final : public nn::Module {
 public:
  BertEmbeddings(const BertConfig& c, nn::LayerFactory& layers) {
    const auto init = nn::ParameterInit::normal(c.init_std);
    word_ = &add_module("word", layers.vocab_embedding(c.vocab_size, c.n_embd, init));
    position_ = &add_module("position", layers.position_embedding(c.max_positions ? c.max_positions : c.seq_len, c.n_embd, init));
    token_type_ = &add_module("token_type", layers.embedding(c.type_vocab_size, c.n_embd, init));
    ln_ = &add_module("ln", layers.layer_norm(c.n_embd, c.ln_eps));
    drop_ = &add_module("drop", layers.dropout(c.dropout));
  }

  Tensor forward(const Tensor& tokens, nn::Context& ctx) override {
    Tensor x = ctx.forward(*word_, tokens, kWord);
    const Tensor& types = ctx.state().batch->token_types;
    // Without token types every token is type 0, as in BERT's reference code.
    Tensor t = ctx.forward(*token_type_, types.defined() ? types : Tensor::zeros(tokens.shape(), DType::i32), kType);
    ops::accumulate(x, t);
    return ctx.forward(*drop_, ctx.forward(*ln_, ctx.forward(*position_, x, kPosition), kLn), kDrop);
  }
  Tensor backward(const Tensor& dy, nn::Context& ctx) override {
    Tensor d = ctx.backward(*position_, ctx.backward(*ln_, ctx.backward(*drop_, dy, kDrop), kLn), kPosition);
    ctx.backward(*token_type_, d, kType);
    return ctx.backward(*word_, d, kWord);
  }
  nn::TableLookup& word_embedding() { return *word_; }

 private:
  enum Slot : std::size_t { kWord, kType, kPosition, kLn, kDrop };
  nn::TableLookup* word_;
  nn::Module* position_;
  nn::TableLookup* token_type_;
  nn::Module* ln_;
  nn::Module* drop_;
};

// dense -> GELU -> LayerNorm -> decoder tied to the word embedding (or, untied, "mlm.weight"), with bias
// "mlm.bias".
class MlmHead final : public nn::Module {
 public:
  MlmHead(const BertConfig& c, nn::TableLookup& word_embedding, nn::LayerFactory& layers) {
    dense_ = &add_module("dense", layers.hidden_linear(c.n_embd, c.n_embd, true, nn::ParameterInit::normal(c.init_std)));
    act_ = &add_module("act", std::make_unique<nn::Gelu>(c.activation));
    ln_ = &add_module("ln", layers.layer_norm(c.n_embd, c.ln_eps));
    decoder_ = &add_module("", c.tie_embeddings ? layers.tied_head(word_embedding, true)
                                                : layers.untied_head(c.vocab_size, c.n_embd,
                                                                     nn::ParameterInit::normal(c.init_std), true));
  }
  Tensor forward(const Tensor& x, nn::Context& ctx) override {
    Tensor h = ctx.forward(*act_, ctx.forward(*dense_, x, kDense), kAct);
    return ctx.forward(*decoder_, ctx.forward(*ln_, h, kLn), kDecoder);
  }
  Tensor backward(const Tensor& dy, nn::Context& ctx) override {
    Tensor d = ctx.backward(*ln_, ctx.backward(*decoder_, dy, kDecoder), kLn);
    return ctx.backward(*dense_, ctx.backward(*act_, d, kAct), kDense);
  }

 private:
  enum Slot : std::size_t { kDense, kAct, kLn, kDecoder };
  nn::Module* dense_;
  nn::Gelu* act_;
  nn::Module* ln_;
  nn::Module* decoder_;
};

class Bert final : public Model {
 public:
  Bert(const BertConfig& c, nn::LayerFactory& layers) {
    auto embedding = std::make_unique<BertEmbeddings>(c, layers);
    nn::TableLookup& word = embedding->word_embedding();
    add_embedding_layer("embeddings", std::move(embedding), c.embedding_on_host);
    nn::BlockConfig b{.n_embd = c.n_embd,
                      .attention = {.n_head = c.n_head, .causal = false, .recompute_qkv = c.checkpointing.selective},
                      .mlp = {.activation = c.activation, .recompute_activation = c.checkpointing.selective},
                      .norm_eps = c.ln_eps,
                      .pre_norm = false,
                      .dropout = c.dropout,
                      .init = nn::ParameterInit::normal(c.init_std),
                      .proj_init = nn::ParameterInit::normal(c.init_std)};
    add_blocks(c.n_layer, [&] { return std::make_unique<nn::TransformerBlock>(b, layers); }, c.checkpointing);
    add_head_and_loss("mlm", std::make_unique<MlmHead>(c, word, layers), layers.cross_entropy(c.vocab_size),
                      c.checkpointing);
  }
  const Tensor& input(const nn::Batch& batch) const override { return batch.tokens; }
};

}  // namespace

std::unique_ptr<Model> make_bert(const BertConfig& cfg, nn::LayerFactory& layers) {
  return std::make_unique<Bert>(cfg, layers);
}

}  // namespace tidal::models
