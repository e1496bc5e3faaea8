#include "models/bert.h"

#include "nn/cross_entropy_loss.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/gelu.h"
#include "nn/layernorm.h"
#include "nn/linear.h"
#include "nn/lm_head.h"
#include "nn/transformer_block.h"
#include "ops/residual.h"

namespace tidal::models {
namespace {

class BertEmbeddings final : public nn::Module {
 public:
  explicit BertEmbeddings(const BertConfig& c) {
    const auto init = nn::ParameterInit::normal(c.init_std);
    word_ = &add_module("word", std::make_unique<nn::Embedding>(c.vocab_size, c.n_embd, init));
    position_ = &add_module("position", std::make_unique<nn::PositionEmbedding>(c.seq_len, c.n_embd, init));
    token_type_ = &add_module("token_type", std::make_unique<nn::Embedding>(c.type_vocab_size, c.n_embd, init));
    ln_ = &add_module("ln", std::make_unique<nn::LayerNorm>(c.n_embd, c.ln_eps));
    drop_ = &add_module("drop", std::make_unique<nn::Dropout>(c.dropout));
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
  nn::Parameter& word_table() { return word_->table(); }

 private:
  enum Slot : std::size_t { kWord, kType, kPosition, kLn, kDrop };
  nn::Embedding* word_;
  nn::PositionEmbedding* position_;
  nn::Embedding* token_type_;
  nn::LayerNorm* ln_;
  nn::Dropout* drop_;
};

// dense -> GELU -> LayerNorm -> decoder tied to the word embedding, with bias "mlm.bias".
class MlmHead final : public nn::Module {
 public:
  MlmHead(const BertConfig& c, nn::Parameter& word_table) {
    dense_ = &add_module("dense", std::make_unique<nn::Linear>(c.n_embd, c.n_embd, true, nn::ParameterInit::normal(c.init_std)));
    act_ = &add_module("act", std::make_unique<nn::Gelu>());
    ln_ = &add_module("ln", std::make_unique<nn::LayerNorm>(c.n_embd, c.ln_eps));
    decoder_ = &add_module("", std::make_unique<nn::TiedLmHead>(word_table, true));
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
  nn::Linear* dense_;
  nn::Gelu* act_;
  nn::LayerNorm* ln_;
  nn::TiedLmHead* decoder_;
};

class Bert final : public Model {
 public:
  explicit Bert(const BertConfig& c) {
    auto& emb = add_layer("embeddings", std::make_unique<BertEmbeddings>(c));
    nn::BlockConfig b{.n_embd = c.n_embd, .n_head = c.n_head, .causal = false, .pre_ln = false, .ln_eps = c.ln_eps,
                      .dropout = c.dropout, .init = nn::ParameterInit::normal(c.init_std),
                      .proj_init = nn::ParameterInit::normal(c.init_std)};
    add_blocks(c.n_layer, [&] { return std::make_unique<nn::TransformerBlock>(b); }, c.checkpointing);
    add_layer("mlm", std::make_unique<MlmHead>(c, emb.word_table()));
    add_layer("loss", std::make_unique<nn::CrossEntropyLoss>());
  }
  const Tensor& input(const nn::Batch& batch) const override { return batch.tokens; }
};

}  // namespace

std::unique_ptr<Model> make_bert(const BertConfig& cfg) { return std::make_unique<Bert>(cfg); }

}  // namespace tidal::models
