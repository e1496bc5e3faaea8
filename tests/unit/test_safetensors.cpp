// safetensors round trip (every dtype, metadata) and atomic writes.
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "support/random.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

namespace tidal {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()))).string();
}

TEST(Safetensors, RoundTripsEveryDtypeAndMetadata) {
  const std::string path = temp_path("roundtrip.safetensors");
  Tensor f = testing::randn({3, 5}, 1), i = Tensor::empty({4}, DType::i32), b = Tensor::empty({2, 3}, DType::bf16),
         h = Tensor::empty({7}, DType::f16), e = Tensor::empty({0, 3});
  for (int k = 0; k < 4; ++k) i.data<std::int32_t>()[k] = k * 1000 - 7;
  for (int k = 0; k < 6; ++k) b.data<bf16>()[k] = to_bf16(float(k) / 3);
  for (int k = 0; k < 7; ++k) h.data<f16>()[k] = to_f16(float(k) - 2.5f);
  io::save_safetensors(path, io::TensorMap{{"f", f}, {"i", i}, {"b", b}, {"h", h}, {"empty", e}}, {{"layout", "data=1"}});
  auto loaded = io::load_safetensors(path);
  EXPECT_EQ(loaded.metadata.at("layout"), "data=1");
  for (auto& [name, t] : io::TensorMap{{"f", f}, {"i", i}, {"b", b}, {"h", h}, {"empty", e}}) {
    const Tensor& u = loaded.tensors.at(name);
    EXPECT_EQ(u.shape(), t.shape()) << name;
    EXPECT_EQ(u.dtype(), t.dtype()) << name;
    if (t.nbytes() > 0) {  // an empty tensor has no data pointer to compare
      EXPECT_EQ(std::memcmp(u.raw(), t.raw(), t.nbytes()), 0) << name;
    }
  }
  std::filesystem::remove(path);
}

TEST(Safetensors, MissingOrTruncatedFilesAreClearErrors) {
  EXPECT_THROW(io::load_safetensors("/nonexistent/x.safetensors"), Error);
  const std::string path = temp_path("truncated.safetensors");
  io::save_safetensors(path, io::TensorMap{{"w", testing::randn({100}, 2)}});
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 10);
  EXPECT_THROW(io::load_safetensors(path), Error);
  std::filesystem::remove(path);
}

// A header in the given JSON text, no tensor data.
void write_header(const std::string& path, const std::string& json) {
  std::ofstream out(path, std::ios::binary);
  const std::uint64_t n = json.size();
  out.write(reinterpret_cast<const char*>(&n), sizeof n);
  out << json;
}

// The fuzzer's find: "__metadata__" holding a string (or an array) was iterated as an object and
// ended the process with the JSON library's own exception.
TEST(Safetensors, MetadataThatIsNotAnObjectOfStringsIsAClearError) {
  const std::string path = temp_path("bad-metadata.safetensors");
  for (const std::string header : {R"({"__metadata__": "tidal"})", R"({"__metadata__": ["a", "b"]})",
                                   R"({"__metadata__": {"a": 1}})", R"({"__metadata__": 3})"}) {
    write_header(path, header);
    try {
      io::SafetensorsReader reader(path);
      ADD_FAILURE() << header << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("metadata"), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove(path);
}

// The fuzzer's find: an extent of 3.7e71 was converted to an integer (undefined behaviour), and
// extents whose product overflows must not pass the offsets' check.
TEST(Safetensors, ExtentsAndOffsetsMustBeWholeNumbersThatSpanTheData) {
  const std::string path = temp_path("bad-extent.safetensors");
  for (const std::string entry : {R"("shape": [3.7e71], "data_offsets": [0, 0])", R"("shape": [2.5], "data_offsets": [0, 8])",
                                  R"("shape": [-1], "data_offsets": [0, 0])", R"("shape": 4, "data_offsets": [0, 16])",
                                  R"("shape": [4294967296, 4294967296, 4], "data_offsets": [0, 0])",
                                  R"("shape": [2], "data_offsets": [0, 1e3])"}) {
    write_header(path, R"({"w": {"dtype": "F32", )" + entry + "}}");
    EXPECT_THROW(io::SafetensorsReader{path}, Error) << entry;
  }
  std::filesystem::remove(path);
}

// Lines of /proc/self/maps: one per mapping of this process.
int mappings() {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);) ++n;
  return n;
}

// A file whose header is refused after it was mapped (the fuzzer's find: the mapping leaked each
// time, until the process ran out of mappings).
TEST(Safetensors, ARefusedFileLeavesNoMappingBehind) {
  const std::string path = temp_path("refused.safetensors");
  {
    std::ofstream out(path, std::ios::binary);
    const std::uint64_t n = 10;
    out.write(reinterpret_cast<const char*>(&n), sizeof n);
    out << "{not json}";
  }
  EXPECT_THROW(io::SafetensorsReader{path}, Error);  // the first call's own allocations settle
  const int before = mappings();
  for (int i = 0; i < 200; ++i) EXPECT_THROW(io::SafetensorsReader{path}, Error);
  EXPECT_LT(mappings() - before, 10) << "200 refused files";
  std::filesystem::remove(path);
}

TEST(Safetensors, AFailedWriteLeavesThePreviousFileIntact) {
  const std::string path = temp_path("atomic.safetensors");
  io::save_safetensors(path, io::TensorMap{{"w", Tensor::full({4}, 1.0f)}});
  {
    // A writer that dies before commit (an exception here) never touches the file.
    io::AtomicFile partial(path);
    const char junk[] = "partial";
    partial.write(junk, sizeof junk);
  }
  auto loaded = io::load_safetensors(path);
  EXPECT_EQ(loaded.tensors.at("w").data<float>()[3], 1.0f);
  for (auto& entry : std::filesystem::directory_iterator(std::filesystem::temp_directory_path()))
    EXPECT_EQ(entry.path().string().find(path + ".tmp"), std::string::npos) << "left behind: " << entry.path();
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace tidal
