// The tensor-parallel communication pairs, each alone: forward against a closed form, and
// backward as the exact adjoint of forward. With "replicated" tensors (the same on every rank,
// one quantity) counted once and "per-rank" tensors summed over ranks, every pair must satisfy
//   <F(x), dy> = <x, F_backward(dy)>,
// the property that makes a layer built from them compute the single-device gradient.
#include "nn/tp/mappings.h"
#include "support/mpi.h"
#include "support/random.h"

#include <gtest/gtest.h>

#include <functional>

namespace tidal::nn::tp {
namespace {

using testing::mpi;

enum class Kind { replicated, per_rank };

double dot(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.numel(), b.numel());
  double s = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) s += double(a.data<float>()[i]) * double(b.data<float>()[i]);
  return s;
}

double total(double local, Kind kind, comm::Communicator& g) {
  if (kind == Kind::replicated) return local;
  Tensor t = Tensor::full({1}, 0.0f);
  // Sum in double precision by exchanging every rank's value (exact enough for the check).
  Tensor all = Tensor::empty({g.size()});
  t.data<float>()[0] = float(local);
  g.all_gather(all, t)->wait();
  double s = 0;
  for (int r = 0; r < g.size(); ++r) s += all.data<float>()[r];
  return s;
}

// A tensor of `kind`: the same on every rank, or different per rank.
Tensor input(const Shape& shape, Kind kind, comm::Communicator& g, std::uint64_t key) {
  return testing::randn(shape, kind == Kind::replicated ? key : key * 1000 + std::uint64_t(g.rank()) + 1);
}

void expect_adjoint(const char* name, comm::Communicator& g, const Shape& x_shape, Kind x_kind, Kind y_kind,
                    const std::function<Tensor(const Tensor&)>& forward,
                    const std::function<Tensor(const Tensor&)>& backward) {
  const Tensor x = input(x_shape, x_kind, g, 11);
  const Tensor y = forward(x);
  const Tensor dy = input(y.shape(), y_kind, g, 12);
  const Tensor dx = backward(dy);
  ASSERT_EQ(dx.shape(), x.shape()) << name;
  const double lhs = total(dot(y, dy), y_kind, g), rhs = total(dot(x, dx), x_kind, g);
  EXPECT_NEAR(lhs, rhs, 1e-4 * (1 + std::abs(lhs))) << name << " on group '" << g.name() << "' of " << g.size();
}

std::vector<std::shared_ptr<comm::Communicator>> groups() {
  static std::vector<std::shared_ptr<comm::Communicator>> all = [] {
    std::vector<std::shared_ptr<comm::Communicator>> g{mpi().world(comm::Seconds(60))};
    const int w = mpi().world_size();
    if (w % 2 == 0 && w > 2) {
      std::vector<std::vector<int>> pairs;
      for (int r = 0; r < w; r += 2) pairs.push_back({r, r + 1});
      g.push_back(mpi().split("pairs", pairs, comm::Seconds(60)));
    }
    return g;
  }();
  return all;
}

TEST(Mappings, EveryPairIsTheAdjointOfItsForward) {
  using K = Kind;
  for (auto& gp : groups()) {
    comm::Communicator& g = *gp;
    const std::int64_t p = g.size();
    const Shape full{3, 5, 4 * p};  // [B, T, C] with C split over the group
    const Shape part{3, 5, 4};
    for (int dim : {2, 1}) {
      const Shape f = dim == 2 ? full : Shape{3, 5 * p, 4};
      const Shape s = dim == 2 ? part : Shape{3, 5, 4};
      expect_adjoint("copy_to_group", g, full, K::replicated, K::per_rank,
                     [&](const Tensor& x) { return CopyToGroup::forward(x, g); },
                     [&](const Tensor& d) { return CopyToGroup::backward(d, g); });
      expect_adjoint("reduce_from_group", g, full, K::per_rank, K::replicated,
                     [&](const Tensor& x) { return ReduceFromGroup::forward(x, g); },
                     [&](const Tensor& d) { return ReduceFromGroup::backward(d, g); });
      expect_adjoint("scatter_to_group", g, f, K::replicated, K::per_rank,
                     [&](const Tensor& x) { return ScatterToGroup::forward(x, g, dim); },
                     [&](const Tensor& d) { return ScatterToGroup::backward(d, g, dim); });
      expect_adjoint("gather_from_group", g, s, K::per_rank, K::replicated,
                     [&](const Tensor& x) { return GatherFromGroup::forward(x, g, dim); },
                     [&](const Tensor& d) { return GatherFromGroup::backward(d, g, dim); });
      expect_adjoint("reduce_scatter_group", g, f, K::per_rank, K::per_rank,
                     [&](const Tensor& x) { return ReduceScatterGroup::forward(x, g, dim); },
                     [&](const Tensor& d) { return ReduceScatterGroup::backward(d, g, dim); });
      expect_adjoint("all_gather_group", g, s, K::per_rank, K::per_rank,
                     [&](const Tensor& x) { return AllGatherGroup::forward(x, g, dim); },
                     [&](const Tensor& d) { return AllGatherGroup::backward(d, g, dim); });
    }
    for (int root = 0; root < g.size(); ++root) {
      expect_adjoint("broadcast_from", g, part, K::per_rank, K::per_rank,
                     [&](const Tensor& x) { return BroadcastFrom::forward(x, g, root); },
                     [&](const Tensor& d) { return BroadcastFrom::backward(d, g, root); });
    }
  }
}

TEST(Mappings, ForwardsMatchClosedForms) {
  for (auto& gp : groups()) {
    comm::Communicator& g = *gp;
    const int p = g.size(), r = g.rank();
    // x[b, t, c] = 100 b + 10 t + c, the same everywhere: rank r keeps columns [2r, 2r + 2).
    Tensor x = Tensor::empty({2, 3, 2 * p});
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const std::int64_t c = i % (2 * p), t = (i / (2 * p)) % 3, b = i / (6 * p);
      x.data<float>()[i] = float(100 * b + 10 * t + c);
    }
    Tensor mine = ScatterToGroup::forward(x, g, 2);
    ASSERT_EQ(mine.shape(), Shape({2, 3, 2}));
    for (std::int64_t i = 0; i < mine.numel(); ++i) {
      const std::int64_t c = i % 2, t = (i / 2) % 3, b = i / 6;
      ASSERT_EQ(mine.data<float>()[i], float(100 * b + 10 * t + 2 * r + c)) << i;
    }
    Tensor back = GatherFromGroup::forward(mine, g, 2);
    ASSERT_EQ(back.shape(), x.shape());
    for (std::int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(back.data<float>()[i], x.data<float>()[i]) << i;
    // Reduce-scatter along dim 1 of rank-valued tensors: every element sums to p (p + 1) / 2.
    Tensor ones = Tensor::full({2, 2 * p, 3}, float(r + 1));
    Tensor rs = ReduceScatterGroup::forward(ones, g, 1);
    ASSERT_EQ(rs.shape(), Shape({2, 2, 3}));
    for (std::int64_t i = 0; i < rs.numel(); ++i) ASSERT_EQ(rs.data<float>()[i], float(p * (p + 1) / 2));
  }
}

}  // namespace
}  // namespace tidal::nn::tp
