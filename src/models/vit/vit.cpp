#include "models/vit/vit.h"

#include "nn/transformer_block.h"
#include "ops/class_token.h"
#include "ops/embedding.h"
#include "ops/cast.h"
#include "ops/patchify.h"

namespace tidal::models {
namespace {

// images -> patches -> Linear -> [class token; patches] + positions -> dropout. The patches
// enter the model split as the factory's F layout, and the projection is an output_linear.
class PatchEmbedding final : public nn::Module {
 public:
  PatchEmbedding(const VitConfig& c, nn::LayerFactory& layers) : patch_size_(c.patch_size) {
    const auto init = nn::ParameterInit::normal(c.init_std);
    const std::int64_t n = (c.image_size / c.patch_size) * (c.image_size / c.patch_size);
    split_ = &add_module("split", layers.split_features());
    patch_ = &add_module("patch", layers.output_linear(c.channels * c.patch_size * c.patch_size, c.n_embd, true, init));
    cls_ = &add_parameter("cls_token", {c.n_embd}, init);
    pos_ = &add_parameter("pos_embed", {n + 1, c.n_embd}, init);
    layers.split_hidden(*cls_);
    layers.split_hidden(*pos_);
    drop_ = &add_module("drop", layers.dropout(c.dropout));
  }

  Tensor forward(const Tensor& images, nn::Context& ctx) override {
    const std::int64_t B = images.dim(0), P = patch_size_;
    Tensor patches = ctx.empty({B, (images.dim(2) / P) * (images.dim(3) / P), images.dim(1) * P * P}, images.dtype());
    ops::patchify(patches, images, P);
    if (patches.dtype() != cls_->data.dtype()) {  // mixed precision: the model computes in its parameters' type
      Tensor narrow = ctx.empty(patches.shape(), cls_->data.dtype());
      ops::cast(narrow, patches);
      patches = narrow;
    }
    Tensor e = ctx.forward(*patch_, ctx.forward(*split_, patches, kSplit), kPatch);  // [B, N, D]
    TIDAL_CHECK(e.dim(1) + 1 == pos_->shape[0], "images give {} patches; the model was built for {} (model.image_size)",
                e.dim(1), pos_->shape[0] - 1);
    Tensor x = ctx.empty({e.dim(0), e.dim(1) + 1, e.dim(2)}, e.dtype());  // this rank's samples
    ops::prepend_token(x, e, cls_->data);
    ops::position_embedding_forward(x, pos_->data);
    return ctx.forward(*drop_, x, kDrop);
  }
  Tensor backward(const Tensor& dy, nn::Context& ctx) override {
    Tensor d = ctx.backward(*drop_, dy, kDrop);
    if (!pos_->frozen) ops::position_embedding_backward(pos_->grad, d);
    Tensor de = ctx.empty({d.dim(0), d.dim(1) - 1, d.dim(2)}, d.dtype());
    Tensor dcls = nn::gradient_or_scratch(*cls_, ctx);
    ops::prepend_token_backward(de, dcls, d);
    ctx.backward(*split_, ctx.backward(*patch_, de, kPatch), kSplit);
    return {};
  }

 private:
  enum Slot : std::size_t { kSplit, kPatch, kDrop };
  std::int64_t patch_size_;
  nn::Module* split_;
  nn::Module* patch_;
  nn::Parameter* cls_;  // [D]
  nn::Parameter* pos_;  // [N + 1, D]
  nn::Module* drop_;
};

// Linear classifier on the class token x[:, 0] (an input_linear: the logits come out split by
// class, as the factory's cross-entropy takes them).
class ClassTokenHead final : public nn::Module {
 public:
  ClassTokenHead(std::int64_t n_embd, std::int64_t num_classes, nn::ParameterInit init, nn::LayerFactory& layers)
      : fc_(&add_module("", layers.input_linear(n_embd, num_classes, true, init))) {}

  Tensor forward(const Tensor& x, nn::Context& ctx) override {
    Tensor cls = ctx.empty({x.dim(0), x.dim(2)}, x.dtype());
    ops::select_token(cls, x, 0);
    ctx.saved = {x};  // for its shape; the storage is kept alive by ln_f's context anyway
    return ctx.forward(*fc_, cls, 0);
  }
  Tensor backward(const Tensor& dy, nn::Context& ctx) override {
    Tensor dcls = ctx.backward(*fc_, dy, 0);
    Tensor dx = ctx.empty(ctx.saved.at(0).shape(), dcls.dtype());
    ops::select_token_backward(dx, dcls, 0);
    ctx.saved.clear();
    return dx;
  }

 private:
  nn::Module* fc_;
};

class Vit final : public Model {
 public:
  Vit(const VitConfig& c, nn::LayerFactory& layers) {
    TIDAL_CHECK(c.patch_size > 0 && c.image_size % c.patch_size == 0,
                "model.image_size ({}) must be a multiple of model.patch_size ({})", c.image_size, c.patch_size);
    add_layer("", std::make_unique<PatchEmbedding>(c, layers));
    nn::BlockConfig b{.n_embd = c.n_embd,
                      .attention = {.n_head = c.n_head, .causal = false, .recompute_qkv = c.checkpointing.selective},
                      .mlp = {.activation = c.activation, .recompute_activation = c.checkpointing.selective},
                      .norm_eps = c.ln_eps,
                      .pre_norm = true,
                      .dropout = c.dropout,
                      .init = nn::ParameterInit::normal(c.init_std),
                      .proj_init = nn::ParameterInit::normal(c.init_std)};
    add_blocks(c.n_layer, [&] { return std::make_unique<nn::TransformerBlock>(b, layers); }, c.checkpointing);
    add_layer("ln_f", layers.layer_norm(c.n_embd, c.ln_eps));
    add_layer("head", std::make_unique<ClassTokenHead>(c.n_embd, c.num_classes, nn::ParameterInit::normal(c.init_std),
                                                       layers));
    add_layer("loss", layers.cross_entropy(c.num_classes));
  }
  const Tensor& input(const nn::Batch& batch) const override { return batch.images; }
};

}  // namespace

std::unique_ptr<Model> make_vit(const VitConfig& cfg, nn::LayerFactory& layers) {
  return std::make_unique<Vit>(cfg, layers);
}

}  // namespace tidal::models
