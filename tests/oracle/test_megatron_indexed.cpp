// Megatron-Core's indexed datasets (megatron-core 0.6.0 in the test venv) against tidal's
// (data/indexed_dataset.h): what megatron's IndexedDatasetBuilder writes, tidal reads sequence for
// sequence and token for token, with the same document indices; and what tidal's writer makes,
// megatron's IndexedDataset reads back as written - uint16 and int32 tokens alike.
#include "data/indexed_dataset.h"
#include "io/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <random>

namespace tidal {
namespace {
namespace fs = std::filesystem;

// megatron_reference.py with `args`; its output safetensors.
io::TensorMap megatron(const std::string& args, const fs::path& out) {
  const std::string cmd = fmt::format("{} {} {} {}", TIDAL_HF_PYTHON, TIDAL_MEGATRON_SCRIPT, args, out.string());
  if (std::system(cmd.c_str()) != 0) throw Error("megatron_reference.py failed: " + cmd);
  return io::load_safetensors(out.string()).tensors;
}

// The dataset at `prefix` holds exactly what megatron read (`ref`).
void expect_equal(const data::IndexedDataset& ds, const io::TensorMap& ref) {
  const Tensor& lengths = ref.at("lengths");
  const Tensor& tokens = ref.at("tokens");
  const Tensor& docs = ref.at("document_indices");
  ASSERT_EQ(ds.sequences(), lengths.numel());
  ASSERT_EQ(ds.documents(), docs.numel() - 1);
  ASSERT_EQ(ds.tokens(), tokens.numel());
  for (std::int64_t d = 0; d < docs.numel(); ++d) ASSERT_EQ(ds.document_index(d), docs.data<std::int32_t>()[d]) << d;
  std::int64_t at = 0;
  for (std::int64_t s = 0; s < ds.sequences(); ++s) {
    const std::int64_t n = lengths.data<std::int32_t>()[s];
    ASSERT_EQ(ds.sequence_length(s), n) << s;
    ASSERT_EQ(ds.sequence_start(s), at) << s;
    std::vector<std::int32_t> got(static_cast<std::size_t>(n));
    ds.read(at, n, got.data());
    ASSERT_TRUE(std::equal(got.begin(), got.end(), tokens.data<std::int32_t>() + at)) << "sequence " << s;
    at += n;
  }
}

TEST(MegatronIndexed, TidalReadsWhatMegatronWrites) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("megatron-{}", ::getpid());
  fs::create_directories(dir);
  for (const char* dtype : {"uint16", "int32"}) {
    const std::string prefix = (dir / dtype).string();
    const io::TensorMap ref = megatron(fmt::format("build {} {} 7", prefix, dtype), dir / "ref.safetensors");
    const data::IndexedDataset ds(prefix);
    EXPECT_EQ(ds.token_bytes(), std::string(dtype) == "uint16" ? 2 : 4);
    expect_equal(ds, ref);
  }
  fs::remove_all(dir);
}

TEST(MegatronIndexed, MegatronReadsWhatTidalWrites) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("megatron-w-{}", ::getpid());
  fs::create_directories(dir);
  std::mt19937 rng(5);
  for (const bool wide : {false, true}) {
    const std::string prefix = (dir / (wide ? "wide" : "narrow")).string();
    data::IndexedDatasetWriter writer(prefix, wide);
    for (int d = 0; d < 60; ++d) {
      std::vector<std::uint32_t> doc(1 + rng() % 40);
      for (std::uint32_t& t : doc) t = rng() % (wide ? 3000000u : 65000u);
      writer.append(doc.data(), doc.size());
      writer.end_document();
    }
    writer.finish();
    expect_equal(data::IndexedDataset(prefix), megatron("read " + prefix, dir / "ref.safetensors"));
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tidal
