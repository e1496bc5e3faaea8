// 1D tensor-parallel linear layers against the single-device Linear of the same name and seed:
// each shard starts from exactly its block of the single-device weight, and the outputs, the
// input gradient and every weight / bias gradient (shard against the same block) agree within
// the fp32 tolerance, for both forms and both ends (split or whole features), on odd sizes.
#include "nn/context.h"
#include "nn/linear.h"
#include "nn/runner.h"
#include "nn/tp/linear_1d.h"
#include "nn/tp/mappings.h"
#include "support/mpi.h"
#include "support/random.h"
#include "support/tolerance.h"

#include <gtest/gtest.h>

namespace tidal::nn::tp {
namespace {

using testing::all_close;
using testing::kFp32;
using testing::mpi;

constexpr std::uint64_t kSeed = 17;

comm::Communicator& world() {
  static std::shared_ptr<comm::Communicator> w = mpi().world(comm::Seconds(60));
  return *w;
}

// The block [first, first + n) of the last dimension, as a contiguous tensor.
Tensor last_slice(const Tensor& t, std::int64_t first, std::int64_t n) {
  return t.slice(t.ndim() - 1, first, first + n).clone();
}

struct Reference {
  Tensor y, dx, dw, db;
};

Reference single_device(std::int64_t in, std::int64_t out, const Tensor& x, const Tensor& dy) {
  Linear lin(in, out, true, ParameterInit::normal(0.5f));
  lin.assign_names("fc");
  for (Parameter* p : lin.parameters()) materialize(*p, kSeed, host_allocator());
  // A non-zero bias, so that its placement is tested too.
  init_normal(lin.parameters()[1]->data, {kSeed, 99}, 0.0f, 1.0f, {out});
  Runner runner;
  StepState state{.runner = &runner};
  Context ctx(state);
  Reference r;
  r.y = lin.forward(x, ctx);
  r.dx = lin.backward(dy, ctx);
  r.dw = lin.parameters()[0]->grad;
  r.db = lin.parameters()[1]->grad;
  return r;
}

template <class Layer>
std::unique_ptr<Layer> parallel_layer(std::int64_t in, std::int64_t out, bool flag) {
  auto layer = std::make_unique<Layer>(in, out, true, ParameterInit::normal(0.5f), world(), flag);
  layer->assign_names("fc");
  for (Parameter* p : layer->parameters()) materialize(*p, kSeed, host_allocator());
  // The reference's non-zero bias: the whole of it, or this rank's block.
  Parameter* bias = layer->parameters()[1];
  Tensor full = Tensor::empty({out});
  init_normal(full, {kSeed, 99}, 0.0f, 1.0f, {out});
  bias->data.copy_from(bias->offset.size() ? last_slice(full, bias->offset[0], bias->shape[0]) : full);
  return layer;
}

TEST(Linear1d, ColumnParallelEqualsTheSingleDeviceLinear) {
  const int p = world().size(), r = world().rank();
  const std::int64_t in = 13, out = 6 * p, local = out / p;
  const Tensor x = testing::randn({3, 5, in}, 1), dy = testing::randn({3, 5, out}, 2);
  const Reference ref = single_device(in, out, x, dy);
  for (bool gather : {false, true}) {
    auto layer = parallel_layer<ColumnParallelLinear>(in, out, gather);
    Runner runner;
    StepState state{.runner = &runner};
    Context ctx(state);
    const Tensor y = layer->forward(x, ctx);
    EXPECT_TRUE(all_close(y, gather ? ref.y : last_slice(ref.y, r * local, local), kFp32)) << "gather " << gather;
    const Tensor dx = layer->backward(gather ? dy : last_slice(dy, r * local, local), ctx);
    EXPECT_TRUE(all_close(dx, ref.dx, kFp32)) << "gather " << gather;
    Tensor dw_block = Tensor::empty({local, in});
    dw_block.copy_from(ref.dw.slice(0, r * local, (r + 1) * local));
    EXPECT_TRUE(all_close(layer->parameters()[0]->grad, dw_block, kFp32));
    EXPECT_TRUE(all_close(layer->parameters()[1]->grad, last_slice(ref.db, r * local, local), kFp32));
  }
}

TEST(Linear1d, RowParallelEqualsTheSingleDeviceLinear) {
  const int p = world().size(), r = world().rank();
  const std::int64_t in = 5 * p, out = 11, local = in / p;
  const Tensor x = testing::randn({3, 5, in}, 3), dy = testing::randn({3, 5, out}, 4);
  const Reference ref = single_device(in, out, x, dy);
  for (bool split : {false, true}) {
    auto layer = parallel_layer<RowParallelLinear>(in, out, split);
    Runner runner;
    StepState state{.runner = &runner};
    Context ctx(state);
    const Tensor y = layer->forward(split ? x : last_slice(x, r * local, local), ctx);
    EXPECT_TRUE(all_close(y, ref.y, kFp32)) << "split " << split;
    const Tensor dx = layer->backward(dy, ctx);
    EXPECT_TRUE(all_close(dx, split ? ref.dx : last_slice(ref.dx, r * local, local), kFp32)) << "split " << split;
    EXPECT_TRUE(all_close(layer->parameters()[0]->grad, last_slice(ref.dw, r * local, local), kFp32));
    EXPECT_TRUE(all_close(layer->parameters()[1]->grad, ref.db, kFp32));
  }
}

TEST(Linear1d, ShardsStartFromTheirBlockOfTheSingleDeviceWeight) {
  const int p = world().size(), r = world().rank();
  Linear lin(7, 4 * p, false, ParameterInit::normal(0.02f));
  lin.assign_names("fc");
  materialize(*lin.parameters()[0], kSeed, host_allocator());
  ColumnParallelLinear col(7, 4 * p, false, ParameterInit::normal(0.02f), world());
  col.assign_names("fc");
  materialize(*col.parameters()[0], kSeed, host_allocator());
  Tensor block = Tensor::empty({4, 7});
  block.copy_from(lin.parameters()[0]->data.slice(0, r * 4, r * 4 + 4));
  // Bit for bit: the same Philox counters.
  EXPECT_TRUE(all_close(col.parameters()[0]->data, block, {0, 0}));
}

}  // namespace
}  // namespace tidal::nn::tp
