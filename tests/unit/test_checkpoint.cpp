// Checkpoints: save / load round trip, and a writer killed with SIGKILL at a random moment
// leaves the previous checkpoint loadable and consistent.
#include "engine/checkpoint.h"
#include "models/gpt.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

namespace tidal {
namespace {

std::unique_ptr<models::Model> small_gpt() {
  auto m = models::make_gpt({.n_layer = 4, .n_head = 4, .n_embd = 128, .vocab_size = 1000, .seq_len = 64});
  m->materialize(3);
  return m;
}

// Every parameter holds `step` (so a checkpoint's contents tell which save they came from).
void fill(models::Model& m, float step) {
  for (nn::Parameter* p : m.parameters()) p->data.fill_(step);
}

TEST(Checkpoint, RoundTripRestoresWeightsMomentsAndStep) {
  const auto dir = std::filesystem::temp_directory_path() / ("ckpt-rt-" + std::to_string(::getpid()));
  auto model = small_gpt();
  optim::AdamW adam(model->parameters(), {});
  for (nn::Parameter* p : model->parameters()) p->grad.fill_(0.5f);
  adam.step();
  engine::save_checkpoint(dir.string(), 7, adam, "[train]\nsteps = 9\n", 2, R"({"pipeline":2})");

  auto other = small_gpt();
  fill(*other, -1.0f);
  optim::AdamW adam2(other->parameters(), {});
  const engine::CheckpointInfo info = engine::load_checkpoint(dir.string(), adam2);
  EXPECT_EQ(info.step, 7);
  EXPECT_EQ(adam2.steps_taken(), 1);
  EXPECT_EQ(info.config_toml, "[train]\nsteps = 9\n");
  EXPECT_EQ(info.layout, R"({"pipeline":2})");
  const auto a = model->parameters(), b = other->parameters();
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(std::memcmp(a[i]->data.raw(), b[i]->data.raw(), a[i]->data.nbytes()), 0) << a[i]->name;
    ASSERT_EQ(std::memcmp(adam.variance(i).raw(), adam2.variance(i).raw(), adam.variance(i).nbytes()), 0);
  }
  // keep = 2: after two more saves only the two newest step directories remain.
  engine::save_checkpoint(dir.string(), 8, adam, "", 2);
  engine::save_checkpoint(dir.string(), 9, adam, "", 2);
  EXPECT_FALSE(std::filesystem::exists(dir / "step-00000007"));
  EXPECT_TRUE(std::filesystem::exists(dir / "step-00000008"));
  EXPECT_TRUE(std::filesystem::exists(dir / "step-00000009"));
  // Saving step 9 again writes beside it and moves `latest`; the older copy is pruned after.
  engine::save_checkpoint(dir.string(), 9, adam, "", 2);
  EXPECT_TRUE(std::filesystem::exists(dir / "step-00000009-1"));
  EXPECT_FALSE(std::filesystem::exists(dir / "step-00000008"));
  EXPECT_EQ(engine::load_checkpoint(dir.string(), adam2).path, (dir / "step-00000009-1").string());
  std::filesystem::remove_all(dir);
}

TEST(Checkpoint, KillDuringWriteLeavesTheLastGoodCheckpoint) {
  const auto dir = std::filesystem::temp_directory_path() / ("ckpt-kill-" + std::to_string(::getpid()));
  {
    auto model = small_gpt();
    optim::AdamW adam(model->parameters(), {});
    fill(*model, 1.0f);
    engine::save_checkpoint(dir.string(), 1, adam, "", 2);  // the first good checkpoint
  }
  for (int trial = 0; trial < 8; ++trial) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // The parent's OpenMP thread pool does not survive fork: stay single-threaded here.
      omp_set_num_threads(1);
      auto model = small_gpt();
      optim::AdamW adam(model->parameters(), {});
      for (int step = 2;; ++step) {
        fill(*model, float(step));
        engine::save_checkpoint(dir.string(), step, adam, "", 2);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(40 + 37 * trial));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status));

    auto model = small_gpt();
    optim::AdamW adam(model->parameters(), {});
    engine::CheckpointInfo info;
    ASSERT_NO_THROW(info = engine::load_checkpoint(dir.string(), adam)) << "trial " << trial;
    // Every parameter holds the value of the step the checkpoint says it is.
    for (nn::Parameter* p : model->parameters())
      for (std::int64_t i = 0; i < p->data.numel(); i += 97)
        ASSERT_EQ(p->data.data<float>()[i], float(info.step)) << p->name << " trial " << trial;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tidal
