// Every collective of MpiCommunicator against closed-form answers: on the world and on
// sub-groups (pairs, strided, reversed order), for fp32 / bf16 / int32, with sizes the group
// does not divide. Inputs are rank-derived integers small enough to be exact in bf16.
#include "comm/counting_communicator.h"
#include "comm/mpi_runtime.h"
#include "core/dtype.h"
#include "support/mpi.h"

#include <gtest/gtest.h>

#include <functional>
#include <numeric>

namespace tidal::comm {
namespace {

using testing::mpi;
constexpr Seconds kTimeout{60};

Tensor filled(std::int64_t n, DType dtype, const std::function<double(std::int64_t)>& value) {
  Tensor t = Tensor::empty({n}, dtype);
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = value(i);
    switch (dtype) {
      case DType::f32: t.data<float>()[i] = float(v); break;
      case DType::bf16: t.data<bf16>()[i] = to_bf16(float(v)); break;
      case DType::f16: t.data<f16>()[i] = to_f16(float(v)); break;
      case DType::i32: t.data<std::int32_t>()[i] = std::int32_t(v); break;
      case DType::u8: t.data<std::uint8_t>()[i] = std::uint8_t(v); break;
    }
  }
  return t;
}

double at(const Tensor& t, std::int64_t i) {
  switch (t.dtype()) {
    case DType::f32: return t.data<float>()[i];
    case DType::bf16: return to_float(t.data<bf16>()[i]);
    case DType::f16: return to_float(t.data<f16>()[i]);
    case DType::i32: return t.data<std::int32_t>()[i];
    case DType::u8: return t.data<std::uint8_t>()[i];
  }
  return 0;
}

void expect_values(const Tensor& t, const std::function<double(std::int64_t)>& want, const std::string& what) {
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    ASSERT_EQ(at(t, i), want(i)) << what << " element " << i << " of " << t.numel() << " (" << dtype_name(t.dtype())
                                 << ")";
  }
}

// The groups every test runs on: the world, consecutive pairs, even / odd ranks, and the world
// listed backwards (group rank order must follow the listing).
std::vector<std::shared_ptr<Communicator>> groups() {
  static std::vector<std::shared_ptr<Communicator>> all = [] {
    const int w = mpi().world_size();
    std::vector<std::shared_ptr<Communicator>> g{mpi().world(kTimeout)};
    if (w % 2 == 0) {
      std::vector<std::vector<int>> pairs, parity(2), halves(2);
      for (int r = 0; r < w; r += 2) pairs.push_back({r, r + 1});
      for (int r = 0; r < w; ++r) parity[std::size_t(r % 2)].push_back(r);
      g.push_back(mpi().split("pairs", pairs, kTimeout));
      g.push_back(mpi().split("parity", parity, kTimeout));
    }
    std::vector<int> backwards(static_cast<std::size_t>(w));
    std::iota(backwards.rbegin(), backwards.rend(), 0);
    g.push_back(mpi().split("backwards", {backwards}, kTimeout));
    return g;
  }();
  return all;
}

const std::vector<DType> kDtypes{DType::f32, DType::bf16, DType::i32};
const std::vector<std::int64_t> kSizes{1, 7, 1003};

TEST(Collectives, GroupRanksFollowTheListing) {
  for (auto& c : groups()) {
    ASSERT_EQ(c->world_ranks()[std::size_t(c->rank())], mpi().world_rank()) << c->name();
  }
  auto back = groups().back();
  EXPECT_EQ(back->rank(), mpi().world_size() - 1 - mpi().world_rank());
}

TEST(Collectives, AllReduceSumMaxMinAvg) {
  for (auto& c : groups()) {
    const double p = c->size(), r = c->rank();
    for (DType dt : kDtypes) {
      for (std::int64_t n : kSizes) {
        const std::string what = fmt::format("{} n={} on {}", dtype_name(dt), n, c->name());
        Tensor s = filled(n, dt, [&](std::int64_t i) { return (r + 1) * double(i % 5 + 1); });
        c->all_reduce(s)->wait();
        expect_values(s, [&](std::int64_t i) { return p * (p + 1) / 2 * double(i % 5 + 1); }, "sum " + what);

        Tensor mx = filled(n, dt, [&](std::int64_t i) { return double((int(r) + i) % int(p)) - 3; });
        c->all_reduce(mx, {.op = ReduceOp::max})->wait();
        expect_values(mx, [&](std::int64_t) { return p - 1 - 3; }, "max " + what);

        Tensor mn = filled(n, dt, [&](std::int64_t i) { return double((int(r) + i) % int(p)) + 2; });
        c->all_reduce(mn, {.op = ReduceOp::min})->wait();
        expect_values(mn, [&](std::int64_t) { return 2.0; }, "min " + what);

        if (dt != DType::i32) {
          Tensor avg = filled(n, dt, [&](std::int64_t) { return r + 1; });
          c->all_reduce(avg, {.op = ReduceOp::avg})->wait();
          expect_values(avg, [&](std::int64_t) { return (p + 1) / 2; }, "avg " + what);
        }
      }
    }
  }
}

TEST(Collectives, BroadcastAndReduce) {
  for (auto& c : groups()) {
    const int p = c->size(), r = c->rank();
    const int root = p - 1;
    for (DType dt : kDtypes) {
      for (std::int64_t n : kSizes) {
        const std::string what = fmt::format("{} n={} on {}", dtype_name(dt), n, c->name());
        Tensor b = filled(n, dt, [&](std::int64_t i) { return r * 10 + double(i % 7); });
        c->broadcast(b, {.root = root})->wait();
        expect_values(b, [&](std::int64_t i) { return root * 10 + double(i % 7); }, "broadcast " + what);

        const int reduce_root = p > 1 ? 1 : 0;
        Tensor s = filled(n, dt, [&](std::int64_t i) { return r + double(i % 3); });
        c->reduce(s, {.op = ReduceOp::sum, .root = reduce_root})->wait();
        if (r == reduce_root) {
          expect_values(s, [&](std::int64_t i) { return p * (p - 1) / 2.0 + p * double(i % 3); }, "reduce " + what);
        } else {
          expect_values(s, [&](std::int64_t i) { return r + double(i % 3); }, "reduce keeps non-root " + what);
        }
        if (dt != DType::i32) {  // avg and max at rank 0 (a group of two reduces through an all-reduce)
          Tensor avg = filled(n, dt, [&](std::int64_t i) { return r + 1 + double(i % 2); });
          c->reduce(avg, {.op = ReduceOp::avg, .root = 0})->wait();
          expect_values(avg, [&](std::int64_t i) { return r == 0 ? (p + 1) / 2.0 + double(i % 2) : r + 1 + double(i % 2); },
                        "reduce avg " + what);
          Tensor top = filled(n, dt, [&](std::int64_t i) { return r + double(i % 4); });
          c->reduce(top, {.op = ReduceOp::max, .root = 0})->wait();
          expect_values(top, [&](std::int64_t i) { return r == 0 ? p - 1 + double(i % 4) : r + double(i % 4); },
                        "reduce max " + what);
        }
      }
    }
  }
}

TEST(Collectives, AllGatherEqualAndUnevenParts) {
  for (auto& c : groups()) {
    const int p = c->size(), r = c->rank();
    for (DType dt : kDtypes) {
      // Equal parts of 3.
      Tensor in = filled(3, dt, [&](std::int64_t i) { return r * 10 + double(i); });
      Tensor out = Tensor::empty({3 * p}, dt);
      c->all_gather(out, in)->wait();
      expect_values(out, [&](std::int64_t i) { return double(i / 3) * 10 + double(i % 3); }, "all_gather equal " + c->name());

      // 2p + 1 elements in balanced parts (the first rank gets one more).
      const std::int64_t total = 2 * p + 1;
      const auto counts = split_counts(total, p);
      std::vector<std::int64_t> first(std::size_t(p), 0);
      for (int k = 1; k < p; ++k) first[std::size_t(k)] = first[std::size_t(k - 1)] + counts[std::size_t(k - 1)];
      Tensor part = filled(counts[std::size_t(r)], dt, [&](std::int64_t j) { return r * 10 + double(j); });
      Tensor whole = Tensor::empty({total}, dt);
      c->all_gather(whole, part, {.counts = counts})->wait();
      expect_values(
          whole,
          [&](std::int64_t i) {
            int owner = p - 1;
            while (first[std::size_t(owner)] > i) --owner;
            return owner * 10 + double(i - first[std::size_t(owner)]);
          },
          "all_gather uneven " + c->name());
    }
  }
}

TEST(Collectives, ReduceScatterEqualAndUnevenParts) {
  for (auto& c : groups()) {
    const int p = c->size(), r = c->rank();
    for (DType dt : kDtypes) {
      for (std::int64_t total : {std::int64_t(4) * p, std::int64_t(4) * p + 3}) {
        const auto counts = split_counts(total, p);
        std::int64_t first = 0;
        for (int k = 0; k < r; ++k) first += counts[std::size_t(k)];
        Tensor in = filled(total, dt, [&](std::int64_t i) { return r + double(i % 11); });
        Tensor out = Tensor::empty({counts[std::size_t(r)]}, dt);
        c->reduce_scatter(out, in, {.counts = counts})->wait();
        expect_values(
            out, [&](std::int64_t j) { return p * (p - 1) / 2.0 + p * double((first + j) % 11); },
            fmt::format("reduce_scatter {} total={} on {}", dtype_name(dt), total, c->name()));
      }
    }
  }
}

TEST(Collectives, SendRecvAroundARing) {
  for (auto& c : groups()) {
    const int p = c->size(), r = c->rank();
    if (p == 1) continue;
    for (DType dt : kDtypes) {
      Tensor out = filled(1003, dt, [&](std::int64_t i) { return r * 10 + double(i % 9); });
      Tensor in = Tensor::empty({1003}, dt);
      const int next = (r + 1) % p, prev = (r + p - 1) % p;
      // Receive first: both are non-blocking, so the ring cannot deadlock.
      WorkPtr rw = c->recv(in, prev, {.tag = 7});
      WorkPtr sw = c->send(out, next, {.tag = 7});
      rw->wait();
      sw->wait();
      expect_values(in, [&](std::int64_t i) { return prev * 10 + double(i % 9); }, "ring recv on " + c->name());
    }
  }
}

TEST(Collectives, ManyInFlightCompleteInOrderOfCall) {
  auto world = groups().front();
  const double p = world->size();
  std::vector<Tensor> buckets;
  std::vector<WorkPtr> works;
  for (int b = 0; b < 16; ++b) {
    buckets.push_back(filled(257 * (b + 1), DType::f32, [&](std::int64_t) { return double(b + world->rank()); }));
    works.push_back(world->all_reduce(buckets.back()));
  }
  for (int b = 0; b < 16; ++b) {
    works[std::size_t(b)]->wait();
    EXPECT_TRUE(works[std::size_t(b)]->is_completed());
    expect_values(buckets[std::size_t(b)], [&](std::int64_t) { return p * b + p * (p - 1) / 2; }, "bucket");
  }
}

TEST(Collectives, BarrierAndErrorsNameTheCall) {
  auto world = groups().front();
  world->barrier()->wait();
  Tensor a = Tensor::empty({5});
  Tensor b = Tensor::empty({7});
  try {
    world->all_gather(b, a);
    if (world->size() * 5 != 7) FAIL() << "uneven all_gather without counts must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("split_counts"), std::string::npos) << e.what();
  }
  Tensor i = Tensor::empty({3}, DType::i32);
  EXPECT_THROW(world->all_reduce(i, {.op = ReduceOp::avg}), Error);
  EXPECT_THROW(world->broadcast(a, {.root = world->size()}), Error);
}

TEST(Collectives, CountingRecordsModelledVolume) {
  CountingCommunicator counted(groups().front());
  const int p = counted.size();
  Tensor t = filled(1000, DType::f32, [](std::int64_t) { return 1.0; });
  counted.all_reduce(t)->wait();
  counted.all_reduce(t)->wait();
  Tensor out = Tensor::empty({1000 * p});
  counted.all_gather(out, t)->wait();
  const auto stats = counted.stats();
  ASSERT_EQ(stats.at("all_reduce").calls, 2);
  EXPECT_EQ(stats.at("all_reduce").elements, 2000);
  EXPECT_DOUBLE_EQ(stats.at("all_reduce").bytes_sent, 2 * 2.0 * (p - 1) / p * 4000);
  EXPECT_GT(stats.at("all_reduce").seconds, 0.0);
  EXPECT_DOUBLE_EQ(stats.at("all_gather").bytes_sent, double(p - 1) / p * 4000 * p);
  EXPECT_EQ(stats.at("all_gather").elements, 1000);
  EXPECT_DOUBLE_EQ(stats.at("all_reduce").link_bytes, stats.at("all_reduce").bytes_sent);
  EXPECT_DOUBLE_EQ(stats.at("all_gather").link_bytes, stats.at("all_gather").bytes_sent);
}

// A broadcast's bytes leave the root; its link term is a scatter plus an all-gather, on every
// rank (patrickstar-v1 sec. 6.2: twice an all-gather's for the same bytes delivered).
TEST(Collectives, CountingModelsBroadcastAsScatterAndAllGather) {
  CountingCommunicator counted(groups().front());
  const int p = counted.size(), root = p - 1;
  Tensor t = filled(1000, DType::f32, [](std::int64_t) { return 1.0; });
  counted.broadcast(t, {.root = root})->wait();
  counted.reduce(t, {.root = root})->wait();
  const auto stats = counted.stats();
  EXPECT_DOUBLE_EQ(stats.at("broadcast").bytes_sent, counted.rank() == root && p > 1 ? 4000.0 : 0.0);
  EXPECT_DOUBLE_EQ(stats.at("broadcast").link_bytes, 2.0 * (p - 1) / p * 4000);
  EXPECT_DOUBLE_EQ(stats.at("reduce").bytes_sent, counted.rank() == root ? 0.0 : 4000.0);
  EXPECT_DOUBLE_EQ(stats.at("reduce").link_bytes, 2.0 * (p - 1) / p * 4000);
}

}  // namespace
}  // namespace tidal::comm
