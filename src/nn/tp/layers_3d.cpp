#include "nn/tp/layers_3d.h"

#include "nn/linear.h"
#include "nn/tp/cross_entropy.h"
#include "nn/tp/embedding.h"
#include "nn/tp/feature_split.h"
#include "nn/tp/mappings.h"
#include "nn/tp/shard.h"
#include "ops/bias.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/residual.h"

namespace tidal::nn::tp {
namespace {

using parallel::GroupKind;


struct Cube {
  comm::Communicator& gx;  // ranks differing only in x, ordered by x
  comm::Communicator& gy;
  comm::Communicator& gz;
  comm::Communicator& tensor;  // the whole cube, ordered by t = x l^2 + y l + z
  int l, x, y, z;
  std::uint64_t stream;  // the tensor index: dropout masks of different blocks differ
  bool keep_gathered;    // a linear's X_ab kept for backward (else gathered again)

  // Orientation A (H): samples block x l + z, features block y. B (F): samples x l + y,
  // features z.
  BatchSlice samples_a() const { return {l * l, x * l + z}; }
  BatchSlice samples_b() const { return {l * l, x * l + y}; }
  FeatureSplit features_a() const { return {&gy, {&gx, &gz}, l * l}; }
  FeatureSplit features_b() const { return {&gz, {&gx, &gy}, l * l}; }
};

// The groups a linear uses: in-features are split over `b`, and the input's samples (later the
// output's features) over `c`; the weight's rows are split over x.
struct Orientation {
  comm::Communicator* b;
  comm::Communicator* c;
};

class Linear3d final : public Module {
 public:
  // Owns W [out, in]: rows block (c l + x) of l^2 (in each segment), columns block b.
  Linear3d(const Cube& cube, Orientation o, std::int64_t in, std::int64_t out, bool bias, ParameterInit init,
           int segments)
      : cube_(cube), o_(o), segments_(segments) {
    const std::int64_t l = cube.l, per_segment = out / segments;
    TIDAL_CHECK(out % segments == 0 && per_segment % (l * l) == 0 && in % l == 0,
                "3D linear [{}, {}]: outputs must split into l^2 = {} and inputs into l = {} parts (check model.n_embd, "
                "model.vocab_size or model.num_classes against parallel.tensor.size)",
                out, in, l * l, l);
    const std::int64_t s = per_segment / (l * l);
    weight_ = &add_parameter("weight", {s * segments, in / l}, init);
    weight_->full_shape = {out, in};
    weight_->offset = {(o.c->rank() * l + cube.x) * s, o.b->rank() * (in / l)};
    weight_->segments = segments;
    if (bias) {
      bias_ = &add_parameter("bias", {out / l}, ParameterInit::zeros());
      bias_->full_shape = {out};
      bias_->offset = {o.c->rank() * (per_segment / l)};
      bias_->segments = segments;
      bias_->copies = int(l * l);
      bias_->replicas = {&cube.gx, o.b};
    }
  }
  // Borrows a table [V, C] placed as an orientation-A weight (a tied head); owns a bias [V].
  Linear3d(const Cube& cube, Orientation o, Parameter& table, bool bias)
      : cube_(cube), o_(o), segments_(1), weight_(&table) {
    if (bias) {
      bias_ = &add_parameter("bias", {table.shape[0] * cube.l}, ParameterInit::zeros());
      FeatureSplit{o.c, {&cube.gx, o.b}, cube.l * cube.l}.place_last(*bias_);
      bias_->full_shape = {table.full_shape[0]};  // the vocabulary, not its padding
    }
  }

  // colossal-ai.txt's 3D product (Table I), with the weight's row blocks of the x group taken one
  // at a time: block r is broadcast by its owner (rank r of gx) and used, and in backward its
  // gradient is reduced to its owner. Only one block of the weight (and of its gradient) is ever
  // held beside the rank's own, never the gathered [out, in / l] (the memory the advanced modes
  // exist to save at large widths); the bytes are the all-gather's and the reduce-scatter's at
  // l = 2 (a broadcast's link bytes are twice an all-gather's share beyond it). The gathered input
  // X_ab is kept for backward under keep_gathered, else gathered again there.
  Tensor forward(const Tensor& x, Context& ctx) override {
    const std::int64_t in = weight_->shape[1], s = weight_->shape[0] / segments_;
    TIDAL_ASSERT(x.dim(-1) == in, "{}: input {} for {} features per rank", path(), x.str(), in);
    const Tensor xg = all_gather_along(x, *o_.c, 0);  // X_ab
    const Tensor xg2 = xg.reshape({-1, in});
    const std::int64_t rows = xg2.dim(0), out = s * segments_ * cube_.l;
    Tensor p = Tensor::empty(xg.shape().with_last(out), x.dtype());
    Tensor p2 = p.reshape({-1, out});
    Tensor panel = Tensor::empty({rows, s * segments_}, x.dtype());
    const Tensor mine = linear_weight(*weight_, x.dtype());
    for (int r = 0; r < cube_.l; ++r) {
      const Tensor w = weight_block(mine, r);  // W_bc's rows of block r
      ops::gemm(panel, xg2, w, {.trans_b = true});
      copy_part_columns(panel, p2, r, cube_.l, segments_, true);  // columns [segments][l][s]
    }
    Tensor y = reduce_scatter_along(p, *o_.b, 0);
    if (bias_) {
      Tensor y2 = y.reshape({-1, out});
      ops::bias_add(y2, bias_->data);
    }
    ctx.saved = {cube_.keep_gathered ? xg : x};
    return y;
  }

  Tensor backward(const Tensor& dy, Context& ctx) override {
    const Tensor xg = cube_.keep_gathered ? ctx.saved.at(0) : all_gather_along(ctx.saved.at(0), *o_.c, 0);
    const std::int64_t in = weight_->shape[1], s = weight_->shape[0] / segments_, out = s * segments_ * cube_.l;
    if (bias_ && !bias_->frozen) ops::bias_grad(bias_->grad, dy.reshape({-1, out}));
    const Tensor dp = all_gather_along(dy, *o_.b, 0);
    const Tensor dp2 = dp.reshape({-1, out}), xg2 = xg.reshape({-1, in});
    const std::int64_t rows = dp2.dim(0);
    Tensor dxg = Tensor::empty(xg.shape(), xg.dtype());
    Tensor dxg2 = dxg.reshape({-1, in});
    Tensor panel = Tensor::empty({rows, s * segments_}, dy.dtype());
    const Tensor mine = linear_weight(*weight_, dy.dtype());
    for (int r = 0; r < cube_.l; ++r) {
      copy_part_columns(panel, dp2, r, cube_.l, segments_, false);
      ops::gemm(dxg2, panel, weight_block(mine, r), {.beta = r == 0 ? 0.0f : 1.0f});  // dX_ab += dP_r W_r
      if (weight_->frozen) continue;  // no gradient, none of its reduces
      // dW_r, summed at its owner: the owner adds its share to its gradient and the reduce adds
      // the others' (one block of buffer at a time: W_r is gone before dW_r exists). Summed in
      // the compute precision: a gradient summed in fp32 in place takes the sum afterwards.
      if (r == cube_.x && weight_->grad.dtype() == dy.dtype()) {
        ops::gemm(weight_->grad, panel, xg2, {.trans_a = true, .beta = 1.0f});
        cube_.gx.reduce(weight_->grad, {.op = comm::ReduceOp::sum, .root = r})->wait();
      } else {
        Tensor dw = Tensor::empty(weight_->shape, dy.dtype());
        ops::gemm(dw, panel, xg2, {.trans_a = true});
        cube_.gx.reduce(dw, {.op = comm::ReduceOp::sum, .root = r})->wait();
        if (r == cube_.x) ops::accumulate(weight_->grad, dw);
      }
    }
    ctx.saved.clear();
    return reduce_scatter_along(dxg, *o_.c, 0);
  }

  std::vector<Parameter*> used_parameters() override {
    std::vector<Parameter*> out{weight_};
    if (bias_) out.push_back(bias_);
    return out;
  }
  // A's columns as the input's features (block b), B's rows as the output's (block c, like the
  // bias); the output's samples are the input's crossed (nn/adapter_split.h).
  AdapterSplit adapter_split() const override {
    return {.in = {.group = o_.b, .replicas = {&cube_.gx, o_.c}, .copies = cube_.l * cube_.l},
            .out = {.group = o_.c, .replicas = {&cube_.gx, o_.b}, .copies = cube_.l * cube_.l},
            .samples_cross = true};
  }

 private:
  // Row block r of the weight: this rank's own (`mine`), or rank r's received over gx.
  Tensor weight_block(const Tensor& mine, int r) const {
    Tensor block = r == cube_.x ? mine : Tensor::empty(mine.shape(), mine.dtype());
    cube_.gx.broadcast(block, {.root = r})->wait();
    return block;
  }
  Cube cube_;
  Orientation o_;
  int segments_;
  Parameter* weight_;
  Parameter* bias_ = nullptr;
};

// Orientation B -> A for the same features: rank (x, y, z) and rank (x, z, y) swap blocks.
class Transpose3d final : public Module {
 public:
  explicit Transpose3d(const Cube& cube) : cube_(cube) {}
  Tensor forward(const Tensor& x, Context&) override { return exchange(x); }
  Tensor backward(const Tensor& dy, Context&) override { return exchange(dy); }

 private:
  Tensor exchange(const Tensor& t) const {
    if (cube_.y == cube_.z) return t;
    const int partner = (cube_.x * cube_.l + cube_.z) * cube_.l + cube_.y;
    Tensor got = Tensor::empty(t.shape(), t.dtype());
    auto sent = cube_.tensor.send(t, partner);
    cube_.tensor.recv(got, partner)->wait();
    sent->wait();
    return got;
  }
  Cube cube_;
};

// A linear whose output is hidden states again: orientation A -> B, then back to A.
class HiddenLinear3d final : public Module {
 public:
  HiddenLinear3d(const Cube& cube, std::unique_ptr<Linear3d> linear)
      : linear_(&add_module("", std::move(linear))), transpose_(&add_module("transpose", std::make_unique<Transpose3d>(cube))) {}
  Tensor forward(const Tensor& x, Context& ctx) override {
    return ctx.forward(*transpose_, ctx.forward(*linear_, x, 0), 1);
  }
  Tensor backward(const Tensor& dy, Context& ctx) override {
    return ctx.backward(*linear_, ctx.backward(*transpose_, dy, 1), 0);
  }

 private:
  Linear3d* linear_;
  Transpose3d* transpose_;
};

// The token table placed as an orientation-A weight (rows block z l + x of l^2, features block
// y), so the tied head multiplies by it in place. Each rank looks up every sample's ids in its
// rows; reduce-scatters over x and then z sum the l^2 row blocks and leave each rank its samples.
class VocabEmbedding3d final : public TableLookup {
 public:
  VocabEmbedding3d(const Cube& cube, std::int64_t num, std::int64_t dim, ParameterInit init) : cube_(cube) {
    const std::int64_t l2 = std::int64_t(cube.l) * cube.l;
    TIDAL_CHECK(dim % cube.l == 0, "3D embedding [{}, {}]: model.n_embd must split into l = {} parts", num, dim, cube.l);
    local_ = padded_vocab(num, l2) / l2;
    first_ = (cube.z * cube.l + cube.x) * local_;
    table_ = &add_parameter("weight", {local_, dim / cube.l}, init);
    table_->full_shape = {num, dim};
    table_->offset = {first_, cube.y * (dim / cube.l)};
  }
  Parameter& table() override { return *table_; }

  Tensor forward(const Tensor& ids, Context& ctx) override {
    const Tensor local = localize_ids(ids, first_, local_, table_->full_shape[0]);
    Shape s = ids.shape();
    s.push_back(table_->shape[1]);
    Tensor partial = ctx.empty(s, table_->data.dtype());
    ops::embedding_forward(partial, local, table_->data);
    ctx.saved = {local};
    return reduce_scatter_along(reduce_scatter_along(partial, cube_.gx, 0), cube_.gz, 0);
  }
  Tensor backward(const Tensor& dy, Context& ctx) override {
    if (table_->frozen) {
      ctx.saved.clear();
      return {};
    }
    const Tensor all = all_gather_along(all_gather_along(dy, cube_.gz, 0), cube_.gx, 0);
    ops::embedding_backward(table_->grad, all, ctx.saved.at(0));
    ctx.saved.clear();
    return {};
  }

 private:
  Cube cube_;
  std::int64_t local_ = 0, first_ = 0;
  Parameter* table_;
};

class Layers3d final : public SplitLayers {
 public:
  explicit Layers3d(const Cube& cube) : SplitLayers(cube.features_a(), cube.samples_a(), cube.stream), c_(cube) {}

  std::unique_ptr<TableLookup> vocab_embedding(std::int64_t num, std::int64_t dim, ParameterInit init) override {
    return std::make_unique<VocabEmbedding3d>(c_, num, dim, init);
  }
  std::unique_ptr<Module> input_linear(std::int64_t in, std::int64_t out, bool bias, ParameterInit init,
                                       int segments) override {
    return std::make_unique<Linear3d>(c_, a_to_b(), in, out, bias, init, segments);
  }
  std::unique_ptr<Module> output_linear(std::int64_t in, std::int64_t out, bool bias, ParameterInit init) override {
    return std::make_unique<Linear3d>(c_, b_to_a(), in, out, bias, init, 1);
  }
  std::unique_ptr<Module> hidden_linear(std::int64_t in, std::int64_t out, bool bias, ParameterInit init) override {
    return std::make_unique<HiddenLinear3d>(c_, std::make_unique<Linear3d>(c_, a_to_b(), in, out, bias, init, 1));
  }
  // Orientation B: samples x l + y, features block z.
  std::unique_ptr<Module> split_features() override { return std::make_unique<SplitInput>(c_.samples_b(), c_.z, c_.l); }
  std::unique_ptr<Module> tied_head(TableLookup& embedding, bool bias) override {
    return std::make_unique<Linear3d>(c_, a_to_b(), embedding.table(), bias);
  }
  std::unique_ptr<Loss> cross_entropy(std::int64_t classes) override {
    const std::int64_t l2 = std::int64_t(c_.l) * c_.l;  // the table's row blocks
    return std::make_unique<VocabParallelCrossEntropy>(classes, padded_vocab(classes, l2), c_.gz, c_.samples_b(),
                                                       std::vector<comm::Communicator*>{&c_.gx, &c_.gy});
  }
  int feature_parts() const override { return c_.l; }
  BatchSlice batch_slice() const override { return c_.samples_b(); }
  Tensor gather_features(const Tensor& part) override {
    return all_gather_along(all_gather_along(all_gather_along(part, c_.gz, -1), c_.gy, 0), c_.gx, 0);
  }

 private:
  Orientation a_to_b() { return {&c_.gy, &c_.gz}; }
  Orientation b_to_a() { return {&c_.gz, &c_.gy}; }

  Cube c_;
};

}  // namespace

std::unique_ptr<LayerFactory> layers_3d(parallel::ParallelContext& pc, bool keep_gathered) {
  const parallel::Coordinates& c = pc.coordinates();
  return std::make_unique<Layers3d>(Cube{pc.group(GroupKind::tensor_x), pc.group(GroupKind::tensor_y),
                                         pc.group(GroupKind::tensor_z), pc.group(GroupKind::tensor),
                                         pc.layout().tensor_side(), c.row, c.col, c.depth, std::uint64_t(c.tensor),
                                         keep_gathered});
}

}  // namespace tidal::nn::tp
