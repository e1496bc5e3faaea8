// Checkpoints in one process: the format-2 round trip (weights, moments, the run's state), the
// asynchronous write reading the state in place until the next update, damaged files reported
// by name, format 1 still read, and a writer killed with SIGKILL at a random moment leaving the
// previous checkpoint loadable and consistent.
#include "comm/self_communicator.h"
#include "engine/checkpoint/checkpointer.h"
#include "engine/checkpoint/reader.h"
#include "io/safetensors.h"
#include "models/gpt/gpt.h"
#include "optim/adamw.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

namespace tidal {
namespace {
namespace fs = std::filesystem;

std::unique_ptr<models::Model> small_gpt() {
  auto m = models::make_gpt({.n_layer = 4, .n_head = 4, .n_embd = 128, .vocab_size = 1000, .seq_len = 64});
  m->materialize(3);
  return m;
}

// Every parameter holds `step` (so a checkpoint's contents tell which save they came from).
void fill(models::Model& m, float step) {
  for (nn::Parameter* p : m.parameters()) p->data.fill_(step);
}

std::vector<engine::HeldBlock> held(optim::AdamW& adam) {
  std::vector<engine::HeldBlock> out;
  const auto& params = adam.parameters();
  for (std::size_t i = 0; i < params.size(); ++i)
    out.push_back({params[i], {{{params[i]->data}, {adam.momentum(i)}, {adam.variance(i)}}}});
  return out;
}

engine::CheckpointInfo info_at(std::int64_t step) {
  return {.step = step, .consumed_samples = 8 * step, .seed = 5, .optimizer = {.adamw_step = step}};
}

bool bitwise(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

fs::path temp_dir(const char* what) { return fs::temp_directory_path() / fmt::format("{}-{}", what, ::getpid()); }

// The byte at `at` of `file` with some of its bits flipped.
void flip_byte(const fs::path& file, std::uint64_t at) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(std::streamoff(at));
  char c = 0;
  f.read(&c, 1);
  c = char(c ^ 0x50);
  f.seekp(std::streamoff(at));
  f.write(&c, 1);
}

struct Saver {
  comm::SelfCommunicator world{"world"}, background{"background"};
  std::vector<nlohmann::json> records;
  engine::Checkpointer checkpointer;
  explicit Saver(bool async, int keep = 2)
      : checkpointer({.keep = keep, .async = async}, world, background, host_allocator(),
                     [this](const nlohmann::json& r) { records.push_back(r); }) {}
};

TEST(Checkpoint, RoundTripRestoresWeightsMomentsAndState) {
  const fs::path dir = temp_dir("ckpt-rt");
  auto model = small_gpt();
  optim::AdamW adam(model->parameters(), {});
  for (nn::Parameter* p : model->parameters()) p->grad.fill_(0.5f);
  adam.step();
  Saver saver(false);
  engine::CheckpointInfo info = info_at(7);
  info.config_toml = "[train]\nsteps = 9\n";
  info.layout = R"({"pipeline":2})";
  info.optimizer.loss_scale = 1024;
  saver.checkpointer.save(dir.string(), info, held(adam));
  ASSERT_EQ(saver.records.size(), 1u);
  EXPECT_EQ(saver.records[0]["checkpoint_step"], 7);
  EXPECT_FALSE(saver.records[0]["checkpoint_async"].get<bool>());
  EXPECT_GT(saver.records[0]["checkpoint_bytes"].get<std::int64_t>(), 12 * model->num_parameters());
  // The stall in its parts: synchronous, the loop waited for the whole write, then the commit.
  const nlohmann::json& r = saver.records[0];
  const double snapshot = r["checkpoint_snapshot_s"], wait = r["checkpoint_writer_wait_s"],
               commit = r["checkpoint_commit_s"];
  EXPECT_GE(snapshot, 0.0);
  EXPECT_GE(commit, 0.0);
  EXPECT_GE(wait, r["checkpoint_write_s"].get<double>());
  EXPECT_NEAR(r["checkpoint_stall_s"].get<double>(), snapshot + wait + commit, 1e-12);
  EXPECT_TRUE(fs::exists(dir / "step-00000007" / "metadata.json"));
  EXPECT_TRUE(fs::exists(dir / "step-00000007" / "rank-00000.safetensors"));

  engine::CheckpointReader reader(dir.string());
  EXPECT_EQ(reader.info().step, 7);
  EXPECT_EQ(reader.info().consumed_samples, 56);
  EXPECT_EQ(reader.info().seed, 5u);
  EXPECT_EQ(reader.info().optimizer.adamw_step, 7);
  EXPECT_EQ(reader.info().optimizer.loss_scale, 1024);
  EXPECT_EQ(reader.info().config_toml, "[train]\nsteps = 9\n");
  EXPECT_EQ(nlohmann::json::parse(reader.info().layout), nlohmann::json::parse(R"({"pipeline":2})"));
  const auto params = model->parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const nn::Parameter& p = *params[i];
    Tensor w = Tensor::empty(p.shape), m = Tensor::empty(p.shape), v = Tensor::empty(p.shape);
    reader.read_block(p.name, p, w);
    reader.read_block("m." + p.name, p, m);
    reader.read_block("v." + p.name, p, v);
    ASSERT_TRUE(bitwise(w, p.data)) << p.name;
    ASSERT_TRUE(bitwise(m, adam.momentum(i))) << p.name;
    ASSERT_TRUE(bitwise(v, adam.variance(i))) << p.name;
    ASSERT_TRUE(bitwise(reader.read_whole(p.name), p.data)) << p.name;
  }
  EXPECT_EQ(reader.verify_all(), std::uint64_t(12 * model->num_parameters()));

  // keep = 2: after two more saves only the two newest step directories remain.
  saver.checkpointer.save(dir.string(), info_at(8), held(adam));
  saver.checkpointer.save(dir.string(), info_at(9), held(adam));
  saver.checkpointer.finish();  // old checkpoints go on a thread of their own
  EXPECT_FALSE(fs::exists(dir / "step-00000007"));
  EXPECT_TRUE(fs::exists(dir / "step-00000008"));
  EXPECT_TRUE(fs::exists(dir / "step-00000009"));
  // Saving step 9 again writes beside it and moves `latest`; the older copy is pruned after.
  saver.checkpointer.save(dir.string(), info_at(9), held(adam));
  saver.checkpointer.finish();
  EXPECT_TRUE(fs::exists(dir / "step-00000009-1"));
  EXPECT_FALSE(fs::exists(dir / "step-00000008"));
  EXPECT_EQ(engine::CheckpointReader(dir.string()).step_dir(), (dir / "step-00000009-1").string());
  fs::remove_all(dir);
}

TEST(Checkpoint, AsynchronousSaveWritesTheStateAsItWasUntilTheNextUpdate) {
  const fs::path dir = temp_dir("ckpt-async");
  auto model = small_gpt();
  fill(*model, 1.0f);
  optim::AdamW adam(model->parameters(), {});
  Saver saver(true);
  saver.checkpointer.save(dir.string(), info_at(1), held(adam));
  EXPECT_TRUE(saver.checkpointer.in_flight());
  EXPECT_TRUE(saver.records.empty());
  saver.checkpointer.before_update();  // the writer reads the weights in place: it is waited for
  fill(*model, 2.0f);                  // the update
  // The commit goes on in the background: `latest` appears with no call from the loop, and the
  // record reaches it only through poll().
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!fs::exists(dir / "latest") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(fs::exists(dir / "latest"));
  EXPECT_TRUE(saver.records.empty());
  while (saver.checkpointer.in_flight() && std::chrono::steady_clock::now() < deadline) {
    saver.checkpointer.poll();  // every rank (the one) done: reported
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_FALSE(saver.checkpointer.in_flight());
  ASSERT_EQ(saver.records.size(), 1u);
  EXPECT_TRUE(saver.records[0]["checkpoint_async"].get<bool>());
  // The loop waited for the snapshot and the write it read in place, not for the commit.
  const nlohmann::json& r = saver.records[0];
  EXPECT_GT(r["checkpoint_commit_s"].get<double>(), 0.0);
  EXPECT_NEAR(r["checkpoint_stall_s"].get<double>(),
              r["checkpoint_snapshot_s"].get<double>() + r["checkpoint_writer_wait_s"].get<double>(), 1e-12);
  engine::CheckpointReader reader(dir.string());
  for (nn::Parameter* p : model->parameters()) {
    const Tensor w = reader.read_whole(p->name);
    ASSERT_EQ(w.data<float>()[0], 1.0f) << p->name;
    ASSERT_EQ(w.data<float>()[w.numel() - 1], 1.0f) << p->name;
  }
  // A second save while one is in flight waits for it: both commit, in order.
  saver.checkpointer.save(dir.string(), info_at(2), held(adam));
  saver.checkpointer.save(dir.string(), info_at(3), held(adam));
  saver.checkpointer.finish();
  ASSERT_EQ(saver.records.size(), 3u);
  EXPECT_EQ(saver.records[1]["checkpoint_step"], 2);
  EXPECT_EQ(saver.records[2]["checkpoint_step"], 3);
  EXPECT_EQ(engine::CheckpointReader(dir.string()).info().step, 3);
  fs::remove_all(dir);
}

// Device-tier memory (the capped tier of a run under offload, a GPU's memory) is staged to host
// memory by an asynchronous save: the writer never reads the device copy, which may change.
TEST(Checkpoint, AsynchronousSaveStagesDeviceTierState) {
  const fs::path dir = temp_dir("ckpt-stage");
  HostAllocator device_tier(MemoryTier::device);  // outlives the tensors it holds
  nn::Parameter p;
  p.name = "w";
  p.shape = {300, 7};
  p.data = Tensor::full(p.shape, 3.0f, device_tier);
  const Tensor m = Tensor::full(p.shape, 4.0f, device_tier), v = Tensor::full(p.shape, 5.0f, device_tier);
  Saver saver(true);
  saver.checkpointer.save(dir.string(), info_at(1), {{&p, {{{p.data}, {m}, {v}}}}});
  p.data.fill_(-1.0f);  // no before_update(): nothing is read in place
  saver.checkpointer.finish();
  EXPECT_EQ(saver.records[0]["checkpoint_host_peak_bytes_per_rank"][0].get<std::int64_t>(), 3 * 300 * 7 * 4);
  engine::CheckpointReader reader(dir.string());
  EXPECT_EQ(reader.read_whole("w").data<float>()[2099], 3.0f);
  EXPECT_EQ(reader.read_whole("v.w").data<float>()[0], 5.0f);
  fs::remove_all(dir);
}

TEST(Checkpoint, DamagedFilesAreReportedByName) {
  const fs::path dir = temp_dir("ckpt-damage");
  auto model = small_gpt();
  optim::AdamW adam(model->parameters(), {});
  Saver saver(false);
  saver.checkpointer.save(dir.string(), info_at(4), held(adam));
  const fs::path file = dir / "step-00000004" / "rank-00000.safetensors";
  const std::uintmax_t size = fs::file_size(file);
  const auto error_of = [&](const std::function<void(engine::CheckpointReader&)>& use) -> std::string {
    try {
      engine::CheckpointReader reader(dir.string());
      use(reader);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  // A byte flipped in the data of the last parameter's variance.
  const nn::Parameter& last = *model->parameters().back();
  flip_byte(file, size - 5);
  const std::string flipped = error_of([&](engine::CheckpointReader& r) { r.verify_all(); });
  EXPECT_NE(flipped.find("rank-00000.safetensors"), std::string::npos) << flipped;
  EXPECT_NE(flipped.find("does not match its checksum"), std::string::npos) << flipped;
  // Reading a block elsewhere in the file is not affected; reading the damaged one is.
  EXPECT_EQ(error_of([&](engine::CheckpointReader& r) { r.read_whole(model->parameters().front()->name); }), "");
  EXPECT_NE(error_of([&](engine::CheckpointReader& r) { r.read_whole("v." + last.name); }), "");
  // Truncated.
  fs::resize_file(file, size - 100);
  const std::string truncated = error_of([&](engine::CheckpointReader& r) { r.read_whole(last.name); });
  EXPECT_NE(truncated.find("truncated"), std::string::npos) << truncated;
  EXPECT_NE(truncated.find("rank-00000.safetensors"), std::string::npos) << truncated;
  // No metadata: not a complete checkpoint.
  fs::remove(dir / "step-00000004" / "metadata.json");
  EXPECT_NE(error_of([](engine::CheckpointReader&) {}).find("not a complete tidal checkpoint"), std::string::npos);
  fs::remove_all(dir);
}

// A rank reading part of a block checks the segments it reads (8 MiB each), not the whole block:
// a byte flipped in the second segment of a 12 MB weight fails a read of rows there only.
TEST(Checkpoint, APartialReadChecksTheSegmentsItReads) {
  const fs::path dir = temp_dir("ckpt-partial");
  HostAllocator memory;
  nn::Parameter p;
  p.name = "w";
  p.shape = {3000, 1000};
  p.data = Tensor::full(p.shape, 1.0f, memory);
  const Tensor m = Tensor::full(p.shape, 2.0f, memory), v = Tensor::full(p.shape, 3.0f, memory);
  Saver saver(false);
  saver.checkpointer.save(dir.string(), info_at(2), {{&p, {{{p.data}, {m}, {v}}}}});
  const fs::path file = dir / "step-00000002" / "rank-00000.safetensors";
  std::uint64_t at = 0;
  {
    const io::SafetensorsReader r(file.string());
    at = r.header_bytes().size() + r.entries().at("w").begin + std::uint64_t(2800) * 1000 * 4;  // row 2800
  }
  flip_byte(file, at);
  // Blocks of rows [0, 1000) and [2500, 3000) of w, as two tensor-parallel ranks would hold them.
  nn::Parameter head = p, tail = p;
  head.shape = tail.shape = {500, 1000};
  head.full_shape = tail.full_shape = p.shape;
  head.offset = {0, 0};
  tail.offset = {2500, 0};
  engine::CheckpointReader reader(dir.string());
  Tensor block = Tensor::empty({500, 1000});
  EXPECT_NO_THROW(reader.read_block("w", head, block));
  EXPECT_EQ(block.data<float>()[0], 1.0f);
  EXPECT_THROW(reader.read_block("w", tail, block), Error);
  fs::remove_all(dir);
}

// Format 1 (whole tensors in model.safetensors and optimizer.safetensors) still loads.
TEST(Checkpoint, ReadsTheWholeTensorFormat) {
  const fs::path dir = temp_dir("ckpt-v1") / "step-00000003";
  fs::create_directories(dir);
  const Tensor w = Tensor::full({4, 6}, 1.5f), m = Tensor::full({4, 6}, 2.5f), v = Tensor::full({4, 6}, 3.5f);
  io::save_safetensors((dir / "model.safetensors").string(), io::TensorMap{{"w", w}},
                       {{"format", "tidal-checkpoint-1"}, {"step", "3"}, {"config", "[train]\n"}, {"layout", "{}"}});
  io::save_safetensors((dir / "optimizer.safetensors").string(), io::TensorMap{{"m.w", m}, {"v.w", v}},
                       {{"format", "tidal-checkpoint-1"}, {"adamw_step", "3"}});
  std::ofstream(dir.parent_path() / "latest") << "step-00000003";
  engine::CheckpointReader reader(dir.parent_path().string());
  EXPECT_EQ(reader.metadata().format, "tidal-checkpoint-1");
  EXPECT_EQ(reader.info().step, 3);
  EXPECT_EQ(reader.info().optimizer.adamw_step, 3);
  // A block of a sharded parameter: rows [2, 4) of the whole tensor.
  nn::Parameter p;
  p.name = "w";
  p.shape = {2, 6};
  p.full_shape = {4, 6};
  p.offset = {2, 0};
  Tensor block = Tensor::empty({2, 6});
  reader.read_block("v.w", p, block);
  EXPECT_EQ(block.data<float>()[11], 3.5f);
  fs::remove_all(dir.parent_path());
}

TEST(Checkpoint, KillDuringWriteLeavesTheLastGoodCheckpoint) {
  const fs::path dir = temp_dir("ckpt-kill");
  {
    auto model = small_gpt();
    optim::AdamW adam(model->parameters(), {});
    fill(*model, 1.0f);
    Saver saver(false);
    saver.checkpointer.save(dir.string(), info_at(1), held(adam));  // the first good checkpoint
  }
  for (int trial = 0; trial < 8; ++trial) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // The parent's OpenMP thread pool does not survive fork: stay single-threaded here.
      omp_set_num_threads(1);
      auto model = small_gpt();
      optim::AdamW adam(model->parameters(), {});
      Saver saver(trial % 2 == 1);  // asynchronous in every other trial
      for (int step = 2;; ++step) {
        saver.checkpointer.before_update();
        fill(*model, float(step));
        saver.checkpointer.poll();
        saver.checkpointer.save(dir.string(), info_at(step), held(adam));
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(40 + 37 * trial));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status));

    auto model = small_gpt();
    std::unique_ptr<engine::CheckpointReader> reader;
    ASSERT_NO_THROW(reader = std::make_unique<engine::CheckpointReader>(dir.string())) << "trial " << trial;
    ASSERT_NO_THROW(reader->verify_all()) << "trial " << trial;
    // Every parameter holds the value of the step the checkpoint says it is.
    for (nn::Parameter* p : model->parameters()) {
      const Tensor w = reader->read_whole(p->name);
      for (std::int64_t i = 0; i < w.numel(); i += 97)
        ASSERT_EQ(w.data<float>()[i], float(reader->info().step)) << p->name << " trial " << trial;
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tidal
