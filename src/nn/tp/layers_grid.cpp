#include "nn/tp/layers_grid.h"

#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/linear.h"
#include "nn/tp/cross_entropy.h"
#include "nn/tp/mappings.h"
#include "nn/tp/summa.h"
#include "ops/bias.h"
#include "ops/embedding.h"

#include <cmath>

namespace tidal::nn::tp {
namespace {

using parallel::GroupKind;

Shape with_last(const Shape& s, std::int64_t last) {
  Shape r = s;
  r[r.size() - 1] = last;
  return r;
}

// The grid as the layers see it.
struct Grid {
  comm::Communicator& row;    // (i, *) in this depth layer, ordered by j
  comm::Communicator& col;    // (*, j) in this depth layer, ordered by i
  comm::Communicator& depth;  // (i, j) in every depth layer, ordered by k
  int q, d, i, j, k;

  std::int64_t part(std::int64_t n, const std::string& what) const {
    TIDAL_CHECK(n % q == 0, "{}: {} does not split over the grid side q = {}", what, n, q);
    return n / q;
  }
  // A parameter whose last dimension is split by column j and held by every row and depth layer.
  void split_last(Parameter& p) const {
    p.full_shape = p.shape;
    p.full_shape[p.shape.size() - 1] = p.shape[p.shape.size() - 1] * q;
    p.offset = Shape(std::vector<std::int64_t>(p.shape.size(), 0));
    p.offset[p.shape.size() - 1] = j * p.shape[p.shape.size() - 1];
    p.copies = q * d;
    p.replicas = {&col, &depth};
  }
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
class GridLinear final : public Module {
 public:
  // Owns W [out, in] (block (i, j)) and the bias [out] (features block j).
  GridLinear(const Grid& g, std::int64_t in, std::int64_t out, bool bias, ParameterInit init, int segments)
      : g_(g) {
    TIDAL_CHECK(out % segments == 0, "linear: {} outputs in {} segments", out, segments);
    weight_ = &add_parameter("weight", {g.part(out / segments, "linear outputs") * segments, g.part(in, "linear inputs")},
                             init);
    g.split_block(*weight_, out, in, segments);
    bias_ = bias ? &add_parameter("bias", {weight_->shape[0]}, ParameterInit::zeros()) : nullptr;
    if (bias_) {
      // The output block j holds the bias rows W's block row j holds, in the same segments.
      bias_->full_shape = {out};
      bias_->offset = {g.j * (weight_->shape[0] / segments)};
      bias_->segments = segments;
      bias_->copies = g.q * g.d;
      bias_->replicas = {&g.col, &g.depth};
    }
  }
  // Borrows `table` [V, C] (block (i, j)) as W; owns a bias [V] (block j) if asked.
  GridLinear(const Grid& g, Parameter& table, bool bias) : g_(g), weight_(&table) {
    bias_ = bias ? &add_parameter("bias", {table.shape[0]}, ParameterInit::zeros()) : nullptr;
    if (bias_) g.split_last(*bias_);
  }

  Tensor forward(const Tensor& x, Context& ctx) override {
    const std::int64_t in = weight_->shape[1], out = weight_->shape[0];
    TIDAL_ASSERT(x.dim(-1) == in, "{}: input {} for {} features per rank", path(), x.str(), in);
    Tensor y = ctx.empty(with_last(x.shape(), out), x.dtype());
    Tensor y2 = y.reshape({-1, out});
    summa_forward(y2, x.reshape({-1, in}), weight_->data, g_.row, g_.col);
    if (bias_) ops::bias_add(y2, bias_->data);
    ctx.saved = {x};
    return y;
  }
  Tensor backward(const Tensor& dy, Context& ctx) override {
    const std::int64_t in = weight_->shape[1], out = weight_->shape[0];
    const Tensor& x = ctx.saved.at(0);
    Tensor dx = ctx.empty(x.shape(), x.dtype());
    Tensor dx2 = dx.reshape({-1, in});
    const Tensor dy2 = dy.reshape({-1, out});
    summa_backward(dx2, weight_->grad, dy2, x.reshape({-1, in}), weight_->data, g_.row, g_.col);
    if (bias_) ops::bias_grad(bias_->grad, dy2);
    ctx.saved.clear();
    return dx;
  }
  std::vector<Parameter*> used_parameters() override {
    std::vector<Parameter*> out{weight_};
    if (bias_) out.push_back(bias_);
    return out;
  }

 private:
  Grid g_;
  Parameter* weight_;
  Parameter* bias_ = nullptr;
};

// LayerNorm over features split by column j: the row group sums each row's statistics.
class GridLayerNorm final : public Module {
 public:
  GridLayerNorm(const Grid& g, std::int64_t features, float eps) : g_(g), eps_(eps), full_(features) {
    const std::int64_t local = g.part(features, "LayerNorm features");
    weight_ = &add_parameter("weight", {local}, ParameterInit::ones());
    bias_ = &add_parameter("bias", {local}, ParameterInit::zeros());
    g.split_last(*weight_);
    g.split_last(*bias_);
  }

  Tensor forward(const Tensor& x, Context& ctx) override {
    const std::int64_t C = weight_->shape[0], rows = x.numel() / C;
    const float* px = x.data<float>();
    // Per-row sum and sum of squares over this rank's features, then over the row group.
    Tensor stats = Tensor::zeros({rows, 2});
    float* ps = stats.data<float>();
#pragma omp parallel for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      double s = 0, s2 = 0;
      for (std::int64_t c = 0; c < C; ++c) {
        const double v = px[r * C + c];
        s += v;
        s2 += v * v;
      }
      ps[2 * r] = float(s);
      ps[2 * r + 1] = float(s2);
    }
    g_.row.all_reduce(stats)->wait();
    Tensor y = ctx.empty(x.shape(), x.dtype());
    Tensor xhat = ctx.empty(x.shape(), x.dtype()), rstd = ctx.empty({rows});
    float *py = y.data<float>(), *ph = xhat.data<float>(), *pr = rstd.data<float>();
    const float *w = weight_->data.data<float>(), *b = bias_->data.data<float>();
#pragma omp parallel for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      const double mean = ps[2 * r] / double(full_);
      const double var = std::max(0.0, ps[2 * r + 1] / double(full_) - mean * mean);
      const float inv = float(1.0 / std::sqrt(var + eps_));
      pr[r] = inv;
      for (std::int64_t c = 0; c < C; ++c) {
        const float h = (px[r * C + c] - float(mean)) * inv;
        ph[r * C + c] = h;
        py[r * C + c] = h * w[c] + b[c];
      }
    }
    ctx.saved = {xhat, rstd};
    return y;
  }

  Tensor backward(const Tensor& dy, Context& ctx) override {
    const Tensor &xhat = ctx.saved.at(0), &rstd = ctx.saved.at(1);
    const std::int64_t C = weight_->shape[0], rows = xhat.numel() / C;
    const float *pd = dy.data<float>(), *ph = xhat.data<float>(), *pr = rstd.data<float>();
    const float* w = weight_->data.data<float>();
    float *dw = weight_->grad.data<float>(), *db = bias_->grad.data<float>();
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < C; ++c) {
        dw[c] += pd[r * C + c] * ph[r * C + c];
        db[c] += pd[r * C + c];
      }
    // dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy w, means over all C features.
    Tensor sums = Tensor::zeros({rows, 2});
    float* ps = sums.data<float>();
#pragma omp parallel for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      double s = 0, sh = 0;
      for (std::int64_t c = 0; c < C; ++c) {
        const double gr = double(pd[r * C + c]) * w[c];
        s += gr;
        sh += gr * ph[r * C + c];
      }
      ps[2 * r] = float(s);
      ps[2 * r + 1] = float(sh);
    }
    g_.row.all_reduce(sums)->wait();
    Tensor dx = ctx.empty(dy.shape(), dy.dtype());
    float* px = dx.data<float>();
#pragma omp parallel for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      const float mg = ps[2 * r] / float(full_), mgh = ps[2 * r + 1] / float(full_);
      for (std::int64_t c = 0; c < C; ++c)
        px[r * C + c] = pr[r] * (pd[r * C + c] * w[c] - mg - ph[r * C + c] * mgh);
    }
    ctx.saved.clear();
    return dx;
  }

 private:
  Grid g_;
  float eps_;
  std::int64_t full_;
  Parameter* weight_;
  Parameter* bias_;
};

// The token table [V, C] as block (i, j): rank (i, j) looks up, for every sample of its depth
// layer, the ids in its vocabulary block i (zero rows for the others), and a reduce-scatter down
// the column sums the blocks and leaves each rank its own samples.
class GridVocabEmbedding final : public TableLookup {
 public:
  GridVocabEmbedding(const Grid& g, std::int64_t num, std::int64_t dim, ParameterInit init)
      : g_(g), local_(g.part(num, "model.vocab_size")), first_(g.i * local_) {
    table_ = &add_parameter("weight", {local_, g.part(dim, "model.n_embd")}, init);
    g.split_block(*table_, num, dim, 1);
  }
  Parameter& table() override { return *table_; }

  Tensor forward(const Tensor& ids, Context& ctx) override {
    const Tensor layer_ids = BatchSlice{g_.d, g_.k}.of(ids);  // this depth layer's samples
    Tensor local = Tensor::empty(layer_ids.shape(), DType::i32);
    const std::int32_t* gid = layer_ids.data<std::int32_t>();
    std::int32_t* l = local.data<std::int32_t>();
    const std::int64_t V = local_ * g_.q;
    for (std::int64_t n = 0; n < layer_ids.numel(); ++n) {
      TIDAL_CHECK(gid[n] >= 0 && gid[n] < V, "token id {} is outside the vocabulary [0, {}): check model.vocab_size "
                  "against the data", gid[n], V);
      l[n] = gid[n] >= first_ && gid[n] < first_ + local_ ? std::int32_t(gid[n] - first_) : ops::kIdElsewhere;
    }
    Shape s = local.shape();
    s.push_back(table_->shape[1]);
    Tensor partial = ctx.empty(s, table_->data.dtype());
    ops::embedding_forward(partial, local, table_->data);
    ctx.saved = {local};
    return ReduceScatterGroup::forward(partial, g_.col, 0);
  }
  Tensor backward(const Tensor& dy, Context& ctx) override {
    ops::embedding_backward(table_->grad, ReduceScatterGroup::backward(dy, g_.col, 0), ctx.saved.at(0));
    ctx.saved.clear();
    return {};
  }

 private:
  Grid g_;
  std::int64_t local_, first_;
  Parameter* table_;
};

// A small table [V, C] with whole rows and features block j: looks up this rank's samples.
class GridEmbedding final : public TableLookup {
 public:
  GridEmbedding(const Grid& g, std::int64_t num, std::int64_t dim, ParameterInit init)
      : g_(g), inner_(&add_module("", std::make_unique<Embedding>(num, g.part(dim, "model.n_embd"), init))) {
    g.split_last(inner_->table());
  }
  Parameter& table() override { return inner_->table(); }
  Tensor forward(const Tensor& ids, Context& ctx) override {
    return ctx.forward(*inner_, g_.samples().of(ids).clone(), 0);
  }
  Tensor backward(const Tensor& dy, Context& ctx) override { return ctx.backward(*inner_, dy, 0); }

 private:
  Grid g_;
  Embedding* inner_;
};

// The replica's whole [B, ..., F] -> this rank's samples and features block j. The input is
// data: no gradient is returned.
class SplitFeatures final : public Module {
 public:
  explicit SplitFeatures(const Grid& g) : g_(g) {}
  Tensor forward(const Tensor& x, Context&) override {
    return slice_for_rank(g_.samples().of(x), -1, g_.j, g_.q);
  }
  Tensor backward(const Tensor&, Context&) override { return {}; }

 private:
  Grid g_;
};

class LayersGrid final : public LayerFactory {
 public:
  explicit LayersGrid(parallel::ParallelContext& pc)
      : g_{pc.group(GroupKind::tensor_row), pc.group(GroupKind::tensor_col), pc.group(GroupKind::tensor_depth),
           pc.layout().tensor_side(), pc.layout().spec().mode == parallel::TensorMode::d2p5 ? pc.layout().spec().depth : 1,
           pc.coordinates().row, pc.coordinates().col, pc.coordinates().depth},
        stream_(std::uint64_t(pc.coordinates().tensor)) {}

  std::unique_ptr<TableLookup> vocab_embedding(std::int64_t num, std::int64_t dim, ParameterInit init) override {
    return std::make_unique<GridVocabEmbedding>(g_, num, dim, init);
  }
  std::unique_ptr<TableLookup> embedding(std::int64_t num, std::int64_t dim, ParameterInit init) override {
    return std::make_unique<GridEmbedding>(g_, num, dim, init);
  }
  std::unique_ptr<Module> position_embedding(std::int64_t max_positions, std::int64_t dim, ParameterInit init) override {
    auto m = std::make_unique<PositionEmbedding>(max_positions, g_.part(dim, "model.n_embd"), init);
    g_.split_last(m->table());
    return m;
  }
  std::unique_ptr<Module> layer_norm(std::int64_t features, float eps) override {
    return std::make_unique<GridLayerNorm>(g_, features, eps);
  }
  std::unique_ptr<Module> dropout(float p) override { return std::make_unique<Dropout>(p, stream_); }
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
  std::unique_ptr<Module> split_features() override { return std::make_unique<SplitFeatures>(g_); }
  std::unique_ptr<Module> tied_head(TableLookup& embedding, bool bias) override {
    return std::make_unique<GridLinear>(g_, embedding.table(), bias);
  }
  std::unique_ptr<Module> cross_entropy(std::int64_t classes) override {
    return std::make_unique<VocabParallelCrossEntropy>(classes, g_.row, g_.samples(),
                                                       std::vector<comm::Communicator*>{&g_.col, &g_.depth});
  }
  void split_hidden(Parameter& p) override {
    p.shape[p.shape.size() - 1] = g_.part(p.shape[p.shape.size() - 1], "model.n_embd");
    g_.split_last(p);
  }
  int feature_parts() const override { return g_.q; }
  BatchSlice batch_slice() const override { return g_.samples(); }
  Tensor gather_features(const Tensor& part) override {
    // Features along the row, then samples down the column (block i) and over depth (block k).
    return all_gather_along(all_gather_along(all_gather_along(part, g_.row, -1), g_.col, 0), g_.depth, 0);
  }

 private:
  Grid g_;
  std::uint64_t stream_;
};

}  // namespace

std::unique_ptr<LayerFactory> layers_grid(parallel::ParallelContext& pc) { return std::make_unique<LayersGrid>(pc); }

}  // namespace tidal::nn::tp
