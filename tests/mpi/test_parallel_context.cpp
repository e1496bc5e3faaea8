// ParallelContext builds real communicators that match its Layout: for every mode that fits the
// launched world, every group's members (gathered over the group itself) are exactly
// Layout::group(kind, rank), in order, and the communicator's rank is the rank's position.
// (The Layout's groups are checked against hand-written tables in tests/unit.)
#include "config/options.h"
#include "parallel/context.h"
#include "support/mpi.h"

#include <gtest/gtest.h>

namespace tidal::parallel {
namespace {

using testing::mpi;

struct Case {
  const char* name;
  int data = 1, pipeline = 1, tensor = 1, sequence = 1;
  const char* mode = "1d";
  int depth = 1;
};

// Layouts per world size: every mode that fits.
std::vector<Case> cases(int world) {
  switch (world) {
    case 2: return {{"data2", 2}, {"pipe2", 1, 2}, {"tensor2", 1, 1, 2}, {"seq2", 1, 1, 1, 2}};
    case 4:
      return {{"data4", 4},
              {"pipe4", 1, 4},
              {"tensor1d4", 1, 1, 4},
              {"data2_tensor2", 2, 1, 2},
              {"seq4", 1, 1, 1, 4},
              {"2d_q2", 1, 1, 4, 1, "2d"},
              {"2.5d_q1_d4", 1, 1, 4, 1, "2.5d", 4},
              {"data2_pipe2", 2, 2}};
    case 8:
      return {{"data2_pipe2_tensor2", 2, 2, 2},
              {"data2_2d_q2", 2, 1, 4, 1, "2d"},
              {"2.5d_q2_d2", 1, 1, 8, 1, "2.5d", 2},
              {"3d_l2", 1, 1, 8, 1, "3d"},
              {"data2_seq4", 2, 1, 1, 4},
              {"pipe2_seq4", 1, 2, 1, 4},
              {"data2_pipe4", 2, 4}};
    case 9: return {{"2d_q3", 1, 1, 9, 1, "2d"}, {"data3_tensor3", 3, 1, 3}};
    default: return {};
  }
}

config::Config config_for(const Case& c) {
  config::Config cfg;
  cfg.model.n_layer = 4;
  cfg.model.n_head = 12;
  cfg.model.n_embd = 144;
  cfg.model.seq_len = 72;
  cfg.model.vocab_size = 144;
  cfg.train.batch_size = 72;
  cfg.parallel.data = c.data;
  cfg.parallel.pipeline = c.pipeline;
  cfg.parallel.tensor.size = c.tensor;
  cfg.parallel.sequence = c.sequence;
  cfg.parallel.tensor.mode = config::parse_choice<parallel::TensorMode>(c.mode).value();
  cfg.parallel.tensor.depth = c.depth;
  cfg.parallel.timeout_s = 60;
  return cfg;
}

TEST(ParallelContext, CommunicatorsMatchTheLayoutInEveryMode) {
  const auto all = cases(mpi().world_size());
  ASSERT_FALSE(all.empty()) << "no layouts for " << mpi().world_size() << " ranks";
  for (const Case& c : all) {
    ParallelContext pc(config::context_options(config_for(c)), &mpi());
    const int me = pc.rank();
    for (GroupKind kind : kAllGroupKinds) {
      comm::Communicator& g = pc.group(kind);
      const std::vector<int> want = pc.layout().group(kind, me);
      ASSERT_EQ(g.size(), int(want.size())) << c.name << " " << group_name(kind);
      EXPECT_EQ(g.rank(), pc.layout().group_index(kind, me)) << c.name << " " << group_name(kind);
      Tensor mine = Tensor::empty({1}, DType::i32);
      mine.data<std::int32_t>()[0] = me;
      Tensor members = Tensor::empty({g.size()}, DType::i32);
      g.all_gather(members, mine)->wait();
      std::vector<int> got(members.data<std::int32_t>(), members.data<std::int32_t>() + g.size());
      EXPECT_EQ(got, want) << c.name << " " << group_name(kind);
    }
  }
}

TEST(ParallelContext, StartUpErrorsNameTheConstraint) {
  const int w = mpi().world_size();
  config::Config cfg = config_for({"bad", w + 1});
  try {
    ParallelContext pc(config::context_options(cfg), &mpi());
    FAIL() << "a layout larger than the world was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("launched"), std::string::npos) << e.what();
  }
  cfg = config_for({"bad batch", w});
  cfg.train.batch_size = w * 3 + 1;
  EXPECT_THROW(ParallelContext(config::context_options(cfg), &mpi()), Error);
}

}  // namespace
}  // namespace tidal::parallel
