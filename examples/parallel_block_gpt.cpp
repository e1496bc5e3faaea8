// A model of one's own, trained under every layout the engine has: a GPT whose blocks run
// attention and the MLP side by side from one LayerNorm (GPT-J's and PaLM's parallel block),
//   y = x + attn(ln(x)) + mlp(ln(x)),
// instead of one after the other. The program registers it as model.type = "parallel_gpt" and
// trains it like `tidal train` does: the same config keys, and under mpirun every rank runs this
// same program, so data, tensor (every mode), pipeline and sequence parallelism, ZeRO, chunks and
// mixed precision apply to it unchanged.
//
//   parallel_block_gpt [--metrics FILE] [section.key=value ...]
//   mpirun -np 4 parallel_block_gpt parallel.tensor.size=2 parallel.data=2
#include "engine/launch.h"
#include "engine/trainer.h"
#include "models/registry.h"
#include "nn/transformer_block.h"
#include "ops/residual.h"

#include <cmath>
#include <string>
#include <vector>

namespace {

using namespace tidal;

// The parallel block: one norm, then attention and the MLP on its output, both added to x.
class ParallelBlock final : public nn::Module {
 public:
  ParallelBlock(const nn::BlockConfig& c, nn::LayerFactory& layers)
      : ln_(&add_module("ln", layers.layer_norm(c.n_embd, c.norm_eps))),
        attn_(&add_module("attn", std::make_unique<nn::MultiHeadSelfAttention>(c.n_embd, c.attention, c.init,
                                                                               c.proj_init, layers))),
        mlp_(&add_module("mlp", std::make_unique<nn::Mlp>(c.n_embd, c.mlp, c.init, c.proj_init, layers))) {}

  Tensor forward(const Tensor& x, nn::Context& ctx) override {
    const Tensor h = ctx.forward(*ln_, x, kLn);
    return sum(sum(x, ctx.forward(*attn_, h, kAttn), ctx), ctx.forward(*mlp_, h, kMlp), ctx);
  }
  Tensor backward(const Tensor& dy, nn::Context& ctx) override {
    // h feeds both branches: its gradient is the sum of theirs.
    const Tensor dh = sum(ctx.backward(*attn_, dy, kAttn), ctx.backward(*mlp_, dy, kMlp), ctx);
    return sum(dy, ctx.backward(*ln_, dh, kLn), ctx);
  }

 private:
  enum Slot : std::size_t { kLn, kAttn, kMlp };
  static Tensor sum(const Tensor& a, const Tensor& b, nn::Context& ctx) {
    Tensor y = ctx.empty(a.shape(), a.dtype());
    ops::residual_add(y, a, b);
    return y;
  }
  nn::Module* ln_;
  nn::Module* attn_;
  nn::Module* mlp_;
};

// Token and learned position embeddings.
class Embedding final : public nn::Module {
 public:
  Embedding(const config::ModelConfig& c, nn::LayerFactory& layers, nn::ParameterInit init)
      : wte_(&add_module("wte", layers.vocab_embedding(c.vocab_size, c.n_embd, init))),
        wpe_(&add_module("wpe", layers.position_embedding(c.seq_len, c.n_embd, init))) {}
  Tensor forward(const Tensor& tokens, nn::Context& ctx) override {
    return ctx.forward(*wpe_, ctx.forward(*wte_, tokens, 0), 1);
  }
  Tensor backward(const Tensor& dy, nn::Context& ctx) override {
    return ctx.backward(*wte_, ctx.backward(*wpe_, dy, 1), 0);
  }
  nn::TableLookup& token_table() { return *wte_; }

 private:
  nn::TableLookup* wte_;
  nn::Module* wpe_;
};

class ParallelGpt final : public models::Model {
 public:
  explicit ParallelGpt(const models::ModelBuild& b) {
    const config::ModelConfig& c = b.config;
    const auto init = nn::ParameterInit::normal(0.02f);
    auto embedding = std::make_unique<Embedding>(c, b.layers, init);
    nn::TableLookup& wte = embedding->token_table();
    add_embedding_layer("", std::move(embedding), b.embedding_on_host);
    const nn::BlockConfig block{.n_embd = c.n_embd,
                                .attention = {.n_head = c.n_head, .causal = true},
                                .init = init,
                                .proj_init = nn::ParameterInit::normal(0.02f / std::sqrt(float(c.n_layer)))};
    add_blocks(c.n_layer, [&] { return std::make_unique<ParallelBlock>(block, b.layers); }, b.checkpointing);
    add_layer("ln_f", b.layers.layer_norm(c.n_embd, 1e-5f));
    // The head and the loss: two layers, or one over blocks of positions (train.loss_chunks).
    add_head_and_loss("lm_head", b.layers.tied_head(wte, false), b.layers.cross_entropy(c.vocab_size), b.checkpointing);
  }
  const Tensor& input(const nn::Batch& batch) const override { return batch.tokens; }
};

}  // namespace

int main(int argc, char** argv) {
  tidal::engine::Launch launch(&argc, &argv);
  return launch.run([&] {
    std::string metrics;
    std::vector<std::string> overrides;
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--metrics" && i + 1 < argc) metrics = argv[++i];
      else overrides.push_back(arg);
    }
    tidal::models::register_model("parallel_gpt", tidal::models::ModelTask::causal_lm,
                                  [](const tidal::models::ModelBuild& b) { return std::make_unique<ParallelGpt>(b); });
    overrides.insert(overrides.begin(), "model.type=parallel_gpt");
    const tidal::config::Config cfg = tidal::config::load_config("", overrides);
    tidal::engine::Trainer trainer(cfg, launch.context(cfg), {.metrics_path = metrics});
    trainer.fit();
  });
}
