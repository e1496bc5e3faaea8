// The disk tier (src/memory/disk_store.h, disk_tier.h): the store's records round-trip bitwise and
// its file goes with it; a directory nobody can write in, one that does not exist and a disk
// without room are errors naming memory.disk_dir; the two staging buffers always show the states
// last written, in any order of access, with and without the read-ahead thread, and a pass over
// the chunks in list order reads and writes each once. A GPT whose host tier holds only part of its
// optimizer states trains with the rest on disk exactly as with every chunk in memory: losses,
// weights and moments bitwise equal.
#include "memory/chunk_manager.h"
#include "memory/disk_tier.h"
#include "models/factory.h"
#include "support/chunk_training.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>

namespace tidal::memory {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the system's temporary one, removed with everything in it.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string name = (fs::temp_directory_path() / "tidal-disk-test-XXXXXX").string();
    path = ::mkdtemp(name.data());
  }
  ~TempDir() { fs::remove_all(path); }
  std::size_t files() const {
    return std::size_t(std::distance(fs::directory_iterator(path), fs::directory_iterator()));
  }
};

std::vector<unsigned char> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::vector<unsigned char> out(n);
  for (unsigned char& b : out) b = static_cast<unsigned char>(gen());
  return out;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DiskStore, RecordsRoundTripBitwiseAndTheFileGoesWithTheStore) {
  TempDir dir;
  constexpr std::size_t kBytes = 1001;  // not a multiple of a page or of a float
  std::string path;
  {
    DiskStore store(dir.path.string(), 3, kBytes, 5);
    path = store.path();
    EXPECT_EQ(fs::path(path).parent_path(), dir.path);
    const std::string name = fs::path(path).filename().string();
    EXPECT_NE(name.find("rank3"), std::string::npos) << name;
    EXPECT_NE(name.find("pid" + std::to_string(::getpid())), std::string::npos) << name;
    EXPECT_EQ(fs::file_size(path), 5 * kBytes);  // reserved at start
    for (int r : {4, 0, 2, 1, 3}) store.write(r, random_bytes(kBytes, unsigned(r)).data());
    store.write(2, random_bytes(kBytes, 22).data());  // overwritten: the others stay
    for (int r : {1, 3, 0, 2, 4}) {
      std::vector<unsigned char> back(kBytes);
      store.read(r, back.data());
      EXPECT_EQ(back, random_bytes(kBytes, r == 2 ? 22u : unsigned(r))) << "record " << r;
    }
    EXPECT_EQ(store.bytes_written(), std::int64_t(6 * kBytes));
    EXPECT_EQ(store.bytes_read(), std::int64_t(5 * kBytes));
    // Two stores in one directory (two ranks, or two runs) never share a file.
    DiskStore other(dir.path.string(), 3, kBytes, 1);
    EXPECT_NE(other.path(), path);
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(dir.files(), 0u);
}

TEST(DiskStore, AMissingOrUnwritableDirectoryIsAnErrorNamingTheKeyAndThePath) {
  TempDir dir;
  // procfs: a directory nobody creates files in, root included (root ignores permission bits).
  const std::string unwritable = error_of([] { DiskStore("/proc", 0, 64, 1); });
  EXPECT_NE(unwritable.find("memory.disk_dir = \"/proc\""), std::string::npos) << unwritable;
  const std::string missing_dir = (dir.path / "missing").string();
  const std::string missing = error_of([&] { DiskStore(missing_dir, 0, 64, 1); });
  EXPECT_NE(missing.find("memory.disk_dir = \"" + missing_dir + "\""), std::string::npos) << missing;
  EXPECT_NE(missing.find("No such file or directory"), std::string::npos) << missing;
}

TEST(DiskStore, ADiskWithoutRoomIsAnErrorAtStart) {
  TempDir dir;
  // 1 PiB: more than the disk has, or than a file may be.
  const std::string text = error_of([&] { DiskStore(dir.path.string(), 0, std::size_t(1) << 30, 1 << 20); });
  EXPECT_NE(text.find("memory.disk_dir = \"" + dir.path.string() + "\": cannot reserve"), std::string::npos) << text;
  EXPECT_NE(text.find(dir.path.string() + "/tidal-rank0-pid"), std::string::npos) << text;  // the file
  EXPECT_EQ(dir.files(), 0u);  // and it is gone
}

// What chunk c's states hold after `version` writes (0: none, a new file reads as zeros): a value
// per element that no other chunk, kind or version shares.
float value(int chunk, int version, std::int64_t i) {
  return version == 0 ? 0.0f : float(chunk * 100000 + version * 1000) + float(i % 997);
}

void write_version(DiskTier& tier, int chunk, int version) {
  const Tensor s = tier.stage(chunk, true);
  for (std::int64_t i = 0; i < s.numel(); ++i) s.data<float>()[i] = value(chunk, version, i);
}

void expect_version(DiskTier& tier, int chunk, int version) {
  const Tensor s = tier.stage(chunk, false);
  for (std::int64_t i = 0; i < s.numel(); ++i)
    ASSERT_EQ(s.data<float>()[i], value(chunk, version, i)) << "chunk " << chunk << " element " << i;
}

TEST(DiskTier, StagedStatesAreTheLastWrittenInAnyOrder) {
  const std::vector<int> chunks = {1, 3, 4, 6, 7};
  for (bool read_ahead : {true, false}) {
    SCOPED_TRACE(read_ahead ? "read ahead" : "no read-ahead");
    TempDir dir;
    HostAllocator host;
    DiskTier tier(dir.path.string(), 0, 257, 3, chunks, host, read_ahead);
    EXPECT_EQ(host.current_bytes(), 2 * 3 * 257 * sizeof(float));  // two staging buffers
    for (int c : chunks) expect_version(tier, c, 0);
    for (int c : chunks) write_version(tier, c, 1);
    // In list order, once passes repeat: each chunk read once and written back once.
    const std::int64_t record = 3 * 257 * sizeof(float);
    const std::int64_t read = tier.bytes_from_disk(), written = tier.bytes_to_disk();
    for (int c : chunks) {
      expect_version(tier, c, 1);
      write_version(tier, c, 2);
    }
    EXPECT_EQ(tier.bytes_from_disk() - read, std::int64_t(chunks.size()) * record);
    EXPECT_EQ(tier.bytes_to_disk() - written, std::int64_t(chunks.size()) * record);
    // Out of order, reads and writes mixed.
    for (int c : {7, 1, 6, 3, 4, 3, 7}) expect_version(tier, c, 2);
    for (int c : {6, 1, 7}) write_version(tier, c, 3);
    for (int c : {4, 7, 3, 1, 6}) expect_version(tier, c, c == 4 || c == 3 ? 2 : 3);
  }
}

constexpr std::int64_t kChunk = 20000;  // 13 chunks

struct Trained {
  std::vector<float> losses;
  std::vector<float> states;  // every parameter's master copy, momentum and variance, concatenated
  std::int64_t disk_chunks = 0, host_peak = 0;
  std::vector<MoveStats> steps;  // the moves of each step
};

// `host_limit` 0: plain chunks, no tiers; otherwise offload with the host tier capped there and
// the disk tier in `disk_dir`.
Trained train(std::int64_t host_limit, const std::string& disk_dir, bool read_ahead) {
  Trained out;
  auto model = models::make_model(testing::chunk_test_gpt());
  model->materialize(11);
  HostAllocator host(MemoryTier::host, host_limit ? std::size_t(host_limit) : std::numeric_limits<std::size_t>::max());
  HostAllocator device(MemoryTier::device);
  std::optional<OffloadOptions> offload;
  if (host_limit) offload = OffloadOptions{.disk_dir = disk_dir, .disk_read_ahead = read_ahead};
  ChunkManager chunks(*model, model->parameters(), {.chunk_elements = kChunk, .offload = offload}, device, host);
  MoveStats before;
  testing::train_on_chunks(*model, chunks, 4, host_allocator(), [&](float loss) {
    out.losses.push_back(loss);
    if (const DynamicMemory* dmm = chunks.dynamic_memory()) {
      const MoveStats now = dmm->stats();
      out.steps.push_back({.bytes_to_disk = now.bytes_to_disk - before.bytes_to_disk,
                           .bytes_from_disk = now.bytes_from_disk - before.bytes_from_disk});
      before = now;
    }
  });
  chunks.gather_state([&](const nn::Parameter&, const Tensor& master, const Tensor& m, const Tensor& v) {
    for (const Tensor* t : {&master, &m, &v})
      out.states.insert(out.states.end(), t->data<float>(), t->data<float>() + t->numel());
  });
  if (const DiskTier* disk = chunks.disk_tier()) out.disk_chunks = std::int64_t(disk->chunks().size());
  out.host_peak = std::int64_t(host.peak_bytes());
  return out;
}

TEST(DiskOffload, OptimizerStatesOnDiskTrainBitwiseLikeChunksInMemory) {
  const Trained plain = train(0, "", false);
  // The host holds the param list and the states of 6 of the 13 chunks; the other 7 go to disk.
  auto model = models::make_model(testing::chunk_test_gpt());
  std::vector<std::int64_t> numels;
  for (const nn::Parameter* p : model->parameters()) numels.push_back(p->shape.numel());
  const ChunkLayout layout = layout_chunks(numels, kChunk);
  ASSERT_EQ(layout.chunks, 13);
  const ChunkOptions options{.chunk_elements = kChunk, .offload = OffloadOptions{}};
  const std::int64_t host_limit = host_bytes_needed(layout, options, 7);
  ASSERT_LT(host_limit, host_bytes_needed(layout, options, 0));
  for (bool read_ahead : {true, false}) {
    SCOPED_TRACE(read_ahead ? "read ahead" : "no read-ahead");
    TempDir dir;
    const Trained disk = train(host_limit, dir.path.string(), read_ahead);
    EXPECT_EQ(dir.files(), 0u);  // the file went with the manager
    EXPECT_EQ(disk.disk_chunks, 7);
    EXPECT_LE(disk.host_peak, host_limit);
    ASSERT_EQ(disk.losses.size(), plain.losses.size());
    EXPECT_EQ(std::memcmp(disk.losses.data(), plain.losses.data(), plain.losses.size() * sizeof(float)), 0);
    ASSERT_EQ(disk.states.size(), plain.states.size());
    EXPECT_EQ(std::memcmp(disk.states.data(), plain.states.data(), plain.states.size() * sizeof(float)), 0);
    // Each step reads every disk chunk's states and writes them back.
    const std::int64_t all = 7 * 3 * kChunk * std::int64_t(sizeof(float));
    for (std::size_t s = 1; s < disk.steps.size(); ++s) {
      EXPECT_EQ(disk.steps[s].bytes_from_disk, all) << "step " << s + 1;
      EXPECT_EQ(disk.steps[s].bytes_to_disk, all) << "step " << s + 1;
    }
  }
}

TEST(DiskOffload, AHostTooSmallEvenWithADiskTierSaysWhatItNeeds) {
  TempDir dir;
  try {
    train(1 << 20, dir.path.string(), true);
    FAIL() << "1 MiB of host should not hold the param list";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("with every chunk's optimizer states in memory.disk_dir the host still needs"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(dir.files(), 0u);
}

}  // namespace
}  // namespace tidal::memory
