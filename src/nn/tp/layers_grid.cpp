#include "nn/tp/layers_grid.h"

#include "nn/linear.h"
#include "nn/tp/cross_entropy.h"
#include "nn/tp/embedding.h"
#include "nn/tp/feature_split.h"
#include "nn/tp/mappings.h"
#include "nn/tp/summa.h"
#include "ops/bias.h"
#include "ops/embedding.h"


namespace tidal::nn::tp {
namespace {

using parallel::GroupKind;


// The grid as the layers see it.
struct Grid {
  comm::Communicator& row;    // (i, *) in this depth layer, ordered by j
  comm::Communicator& col;    // (*, j) in this depth layer, ordered by i
  comm::Communicator& depth;  // (i, j) in every depth layer, ordered by k
  int q, d, i, j, k;
  std::uint64_t stream;  // the tensor index: dropout masks of different blocks differ
  bool keep_gathered;    // 2.5D: weight blocks whole in every depth layer (else in depth slices)

  std::int64_t part(std::int64_t n, const std::string& what) const {
    TIDAL_CHECK(n % q == 0, "{}: {} does not split over the grid side q = {}", what, n, q);
    return n / q;
  }
  // Features split by column j; a feature-shaped parameter is held by every row and depth layer.
  FeatureSplit features() const { return {&row, {&col, &depth}, q * d}; }
  // Block (i, j) of a weight [out, in] (segments: of each of that many parts of the rows).
  void split_block(Parameter& p, std::int64_t out, std::int64_t in, int segments) const {
    p.full_shape = {out, in};
    p.offset = {i * (p.shape[0] / segments), j * p.shape[1]};
    p.segments = segments;
    p.copies = d;
    p.replicas = {&depth};
  }
  BatchSlice samples() const { return {d * q, k * q + i}; }
};

// Y = X W^T (+ b) as a SUMMA product; W is owned, or borrowed from an embedding (tied head).
// An owned W under 2.5D (d > 1) is held in depth slices (summa.h's DepthSlices): each element
// once in the tensor group, not once per depth layer (unless keep_gathered: whole blocks, less
// traffic).
class GridLinear final : public Module {
 public:
  // Owns W [out, in] (block (i, j), or its slice k) and the bias [out] (features block j).
  GridLinear(const Grid& g, std::int64_t in, std::int64_t out, bool bias, ParameterInit init, int segments)
      : g_(g), segments_(segments), sliced_(g.d > 1 && !g.keep_gathered) {
    TIDAL_CHECK(out % segments == 0, "linear: {} outputs in {} segments", out, segments);
    const std::int64_t block = g.part(out / segments, "linear outputs");  // rows per segment in a block
    TIDAL_CHECK(!sliced_ || block % g.d == 0,
                "2.5D linear: the {} rows per segment of a weight block must split over parallel.tensor.depth = {} "
                "(check model.n_embd and the MLP width against parallel.tensor.size)",
                block, g.d);
    const std::int64_t rows = sliced_ ? block / g.d : block;
    weight_ = &add_parameter("weight", {rows * segments, g.part(in, "linear inputs")}, init);
    g.split_block(*weight_, out, in, segments);
    if (sliced_) {  // slice k of block (i, j): rows [i block + k rows, + rows) of each segment
      weight_->offset = {g.i * block + g.k * rows, g.j * weight_->shape[1]};
      weight_->copies = 1;
      weight_->replicas = {};
    }
    bias_ = bias ? &add_parameter("bias", {block * segments}, ParameterInit::zeros()) : nullptr;
    if (bias_) {
      // The output block j holds the bias rows W's block row j holds, in the same segments.
      bias_->full_shape = {out};
      bias_->offset = {g.j * block};
      bias_->segments = segments;
      bias_->copies = g.q * g.d;
      bias_->replicas = {&g.col, &g.depth};
    }
  }
  // Borrows `table` [V, C] (block (i, j)) as W; owns a bias [V] (block j) if asked.
  GridLinear(const Grid& g, Parameter& table, bool bias) : g_(g), weight_(&table) {
    bias_ = bias ? &add_parameter("bias", {table.shape[0]}, ParameterInit::zeros()) : nullptr;
    if (bias_) {
      g.features().place_last(*bias_);
      bias_->full_shape = {table.full_shape[0]};  // the vocabulary, not its padding
    }
  }

  Tensor forward(const Tensor& x, Context& ctx) override {
    const std::int64_t in = weight_->shape[1], out = out_features();
    TIDAL_ASSERT(x.dim(-1) == in, "{}: input {} for {} features per rank", path(), x.str(), in);
    Tensor y = ctx.empty(x.shape().with_last(out), x.dtype());
    Tensor y2 = y.reshape({-1, out});
    const Tensor w = linear_weight(*weight_, x.dtype());
    if (sliced_)
      summa_forward(y2, x.reshape({-1, in}), w, g_.row, g_.col, {&g_.depth, segments_});
    else
      summa_forward(y2, x.reshape({-1, in}), w, g_.row, g_.col);
    if (bias_) ops::bias_add(y2, bias_->data);
    ctx.saved = {x};
    return y;
  }
  Tensor backward(const Tensor& dy, Context& ctx) override {
    const std::int64_t in = weight_->shape[1], out = out_features();
    const Tensor& x = ctx.saved.at(0);
    Tensor dx = ctx.empty(x.shape(), x.dtype());
    Tensor dx2 = dx.reshape({-1, in});
    const Tensor dy2 = dy.reshape({-1, out});
    const Tensor w = linear_weight(*weight_, dy.dtype());
    if (sliced_)
      summa_backward(dx2, weight_->grad, dy2, x.reshape({-1, in}), w, g_.row, g_.col, {&g_.depth, segments_});
    else
      summa_backward(dx2, weight_->grad, dy2, x.reshape({-1, in}), w, g_.row, g_.col);
    if (bias_ && !bias_->frozen) ops::bias_grad(bias_->grad, dy2);
    ctx.saved.clear();
    return dx;
  }
  std::vector<Parameter*> used_parameters() override {
    std::vector<Parameter*> out{weight_};
    if (bias_) out.push_back(bias_);
    return out;
  }
  // A's columns and B's rows as the hidden states' features: block j, every row and depth layer.
  AdapterSplit adapter_split() const override {
    const AdapterSplit::Features features{.group = &g_.row, .replicas = {&g_.col, &g_.depth}, .copies = g_.q * g_.d};
    return {.in = features, .out = features};
  }

 private:
  // The features of this rank's output block.
  std::int64_t out_features() const { return weight_->shape[0] * (sliced_ ? g_.d : 1); }

  Grid g_;
  int segments_ = 1;
  bool sliced_ = false;  // W held in depth slices
  Parameter* weight_;
  Parameter* bias_ = nullptr;
};

// The token table [V, C] as block (i, j): rank (i, j) looks up, for every sample of its depth
// layer, the ids in its vocabulary block i (zero rows for the others), and a reduce-scatter down
// the column sums the blocks and leaves each rank its own samples.
class GridVocabEmbedding final : public TableLookup {
 public:
  GridVocabEmbedding(const Grid& g, std::int64_t num, std::int64_t dim, ParameterInit init)
      : g_(g), local_(padded_vocab(num, g.q) / g.q), first_(g.i * local_) {
    table_ = &add_parameter("weight", {local_, g.part(dim, "model.n_embd")}, init);
    g.split_block(*table_, num, dim, 1);
  }
  Parameter& table() override { return *table_; }

  Tensor forward(const Tensor& ids, Context& ctx) override {
    // This depth layer's samples.
    const Tensor local = localize_ids(BatchSlice{g_.d, g_.k}.of(ids), first_, local_, table_->full_shape[0]);
    Shape s = local.shape();
    s.push_back(table_->shape[1]);
    Tensor partial = ctx.empty(s, table_->data.dtype());
    ops::embedding_forward(partial, local, table_->data);
    ctx.saved = {local};
    return ReduceScatterGroup::forward(partial, g_.col, 0);
  }
  Tensor backward(const Tensor& dy, Context& ctx) override {
    if (!table_->frozen)
      ops::embedding_backward(table_->grad, ReduceScatterGroup::backward(dy, g_.col, 0), ctx.saved.at(0));
    ctx.saved.clear();
    return {};
  }

 private:
  Grid g_;
  std::int64_t local_, first_;
  Parameter* table_;
};

class LayersGrid final : public SplitLayers {
 public:
  explicit LayersGrid(const Grid& g) : SplitLayers(g.features(), g.samples(), g.stream), g_(g) {}

  std::unique_ptr<TableLookup> vocab_embedding(std::int64_t num, std::int64_t dim, ParameterInit init) override {
    return std::make_unique<GridVocabEmbedding>(g_, num, dim, init);
  }
  std::unique_ptr<Module> input_linear(std::int64_t in, std::int64_t out, bool bias, ParameterInit init,
                                       int segments) override {
    return std::make_unique<GridLinear>(g_, in, out, bias, init, segments);
  }
  std::unique_ptr<Module> output_linear(std::int64_t in, std::int64_t out, bool bias, ParameterInit init) override {
    return std::make_unique<GridLinear>(g_, in, out, bias, init, 1);
  }
  std::unique_ptr<Module> hidden_linear(std::int64_t in, std::int64_t out, bool bias, ParameterInit init) override {
    return std::make_unique<GridLinear>(g_, in, out, bias, init, 1);
  }
  std::unique_ptr<Module> split_features() override { return std::make_unique<SplitInput>(g_.samples(), g_.j, g_.q); }
  std::unique_ptr<Module> tied_head(TableLookup& embedding, bool bias) override {
    return std::make_unique<GridLinear>(g_, embedding.table(), bias);
  }
  std::unique_ptr<Loss> cross_entropy(std::int64_t classes) override {
    return std::make_unique<VocabParallelCrossEntropy>(classes, padded_vocab(classes, g_.q), g_.row, g_.samples(),
                                                       std::vector<comm::Communicator*>{&g_.col, &g_.depth});
  }
  int feature_parts() const override { return g_.q; }
  BatchSlice batch_slice() const override { return g_.samples(); }
  Tensor gather_features(const Tensor& part) override {
    // Features along the row, then samples down the column (block i) and over depth (block k).
    return all_gather_along(all_gather_along(all_gather_along(part, g_.row, -1), g_.col, 0), g_.depth, 0);
  }

 private:
  Grid g_;
};

}  // namespace

std::unique_ptr<LayerFactory> layers_grid(parallel::ParallelContext& pc, bool keep_gathered) {
  const parallel::MeshSpec& spec = pc.layout().spec();
  const parallel::Coordinates& c = pc.coordinates();
  return std::make_unique<LayersGrid>(Grid{pc.group(GroupKind::tensor_row), pc.group(GroupKind::tensor_col),
                                           pc.group(GroupKind::tensor_depth), pc.layout().tensor_side(),
                                           spec.mode == parallel::TensorMode::d2p5 ? spec.depth : 1, c.row, c.col,
                                           c.depth, std::uint64_t(c.tensor), keep_gathered});
}

}  // namespace tidal::nn::tp
