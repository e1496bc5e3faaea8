// TensorBoard event files: the CRC32C check value, and a written file decoded back record by record
// by an independent reader (a bitwise CRC32C and a minimal protocol buffer parser written here).
#include "io/tensorboard.h"

#include "core/error.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tidal {
namespace {

// Bit by bit, so that it checks the library's table-driven version instead of repeating it.
std::uint32_t reference_crc32c(const std::string& bytes) {
  std::uint32_t crc = 0xffffffffu;
  for (unsigned char b : bytes) {
    crc ^= b;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

std::uint32_t reference_masked(const std::string& bytes) {
  const std::uint32_t c = reference_crc32c(bytes);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::uint64_t little_endian(const std::string& s, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= std::uint64_t(static_cast<unsigned char>(s.at(at + i))) << (8 * i);
  return v;
}

// A cursor over one protocol buffer message: the fields tidal writes, and nothing else accepted.
struct Reader {
  const std::string& s;
  std::size_t at = 0;

  bool done() const { return at == s.size(); }
  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      const auto b = static_cast<unsigned char>(s.at(at++));
      v |= std::uint64_t(b & 0x7fu) << shift;
      if (!(b & 0x80u)) return v;
    }
  }
  std::string bytes() {
    const std::size_t n = varint();
    EXPECT_LE(at + n, s.size());
    std::string out = s.substr(at, n);
    at += n;
    return out;
  }
  std::uint64_t fixed(int n) {
    const std::uint64_t v = little_endian(s, at, n);
    at += std::size_t(n);
    return v;
  }
};

struct Event {
  double wall_time = 0;
  std::int64_t step = 0;
  std::optional<std::string> file_version;
  std::vector<std::pair<std::string, float>> values;  // summary.value{tag, simple_value}
};

std::pair<std::string, float> parse_value(const std::string& msg) {
  Reader r{msg};
  std::pair<std::string, float> value{"", std::nanf("")};
  while (!r.done()) {
    const std::uint64_t key = r.varint();
    if (key == (1u << 3 | 2)) {
      value.first = r.bytes();
    } else if (key == (2u << 3 | 5)) {
      const auto bits = std::uint32_t(r.fixed(4));
      std::memcpy(&value.second, &bits, 4);
    } else {
      ADD_FAILURE() << "unexpected Summary.Value key " << key;
      break;
    }
  }
  return value;
}

Event parse_event(const std::string& msg) {
  Reader r{msg};
  Event e;
  while (!r.done()) {
    const std::uint64_t key = r.varint();
    if (key == (1u << 3 | 1)) {
      const std::uint64_t bits = r.fixed(8);
      std::memcpy(&e.wall_time, &bits, 8);
    } else if (key == (2u << 3 | 0)) {
      e.step = std::int64_t(r.varint());
    } else if (key == (3u << 3 | 2)) {
      e.file_version = r.bytes();
    } else if (key == (5u << 3 | 2)) {
      const std::string summary = r.bytes();
      Reader s{summary};
      while (!s.done()) {
        EXPECT_EQ(s.varint(), 1u << 3 | 2) << "Summary holds only repeated value = 1";
        e.values.push_back(parse_value(s.bytes()));
      }
    } else {
      ADD_FAILURE() << "unexpected Event key " << key;
      break;
    }
  }
  return e;
}

// Every TFRecord of the file, with both CRCs checked.
std::vector<Event> read_events(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<Event> events;
  std::size_t at = 0;
  while (at < file.size()) {
    EXPECT_LE(at + 12, file.size()) << "truncated record header at byte " << at;
    if (at + 12 > file.size()) break;
    const std::uint64_t length = little_endian(file, at, 8);
    EXPECT_EQ(little_endian(file, at + 8, 4), reference_masked(file.substr(at, 8))) << "length CRC at byte " << at;
    EXPECT_LE(at + 12 + length + 4, file.size()) << "truncated record at byte " << at;
    if (at + 12 + length + 4 > file.size()) break;
    const std::string data = file.substr(at + 12, length);
    EXPECT_EQ(little_endian(file, at + 12 + length, 4), reference_masked(data)) << "data CRC at byte " << at;
    events.push_back(parse_event(data));
    at += 12 + length + 4;
  }
  return events;
}

std::string temp_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

TEST(TensorBoard, Crc32cCheckValue) {
  const std::string check = "123456789";
  EXPECT_EQ(io::crc32c(check.data(), check.size()), 0xE3069283u);
  EXPECT_EQ(reference_crc32c(check), 0xE3069283u);
  EXPECT_EQ(io::crc32c("", 0), 0u);
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(char(b));
  EXPECT_EQ(io::crc32c(all.data(), all.size()), reference_crc32c(all));
}

TEST(TensorBoard, EventsRoundTrip) {
  const std::string dir = temp_dir("tensorboard-rt") + "/nested/run";
  std::string path;
  {
    io::TensorBoardWriter tb(dir);
    path = tb.path();
    const std::string name = std::filesystem::path(path).filename().string();
    EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
    EXPECT_EQ(name.substr(name.size() - 6), ".tidal") << name;
    tb.scalar("loss", 1, 3.25);
    tb.scalar("lr", 300, 6e-4);
    tb.scalar("big_step", std::int64_t(1) << 40, -1.5);
    tb.scalars({{"step", 7},
                {"loss", 2.5},
                {"skipped", true},
                {"precision", "bf16"},
                {"missing", nullptr},
                {"profile", {{"forward_s", 0.125}, {"inner", {{"n", 3}}}}},
                {"ranks", {10, false, "x", {{"k", 4.0}}}}},
               7);
    tb.scalars({{"step", 8}, {"name", "only strings"}}, 8);  // no number: no event
  }
  const std::vector<Event> events = read_events(path);
  ASSERT_EQ(events.size(), 5u);
  const double now = double(std::time(nullptr));
  for (const Event& e : events) EXPECT_NEAR(e.wall_time, now, 60.0);

  ASSERT_TRUE(events[0].file_version.has_value());
  EXPECT_EQ(*events[0].file_version, "brain.Event:2");
  EXPECT_TRUE(events[0].values.empty());

  using Values = std::vector<std::pair<std::string, float>>;
  EXPECT_EQ(events[1].step, 1);
  EXPECT_EQ(events[1].values, (Values{{"loss", 3.25f}}));
  EXPECT_EQ(events[2].step, 300);
  EXPECT_EQ(events[2].values, (Values{{"lr", 6e-4f}}));
  EXPECT_EQ(events[3].step, std::int64_t(1) << 40);
  EXPECT_EQ(events[3].values, (Values{{"big_step", -1.5f}}));

  EXPECT_EQ(events[4].step, 7);
  std::map<std::string, float> flat(events[4].values.begin(), events[4].values.end());
  EXPECT_EQ(flat.size(), events[4].values.size()) << "a tag written twice";
  EXPECT_EQ(flat, (std::map<std::string, float>{{"loss", 2.5f},
                                                {"skipped", 1.0f},
                                                {"profile/forward_s", 0.125f},
                                                {"profile/inner/n", 3.0f},
                                                {"ranks/0", 10.0f},
                                                {"ranks/1", 0.0f},
                                                {"ranks/3/k", 4.0f}}));
  std::filesystem::remove_all(std::filesystem::path(dir).parent_path().parent_path());
}

TEST(TensorBoard, TwoWritersInOneDirectoryKeepSeparateFiles) {
  const std::string dir = temp_dir("tensorboard-two");
  io::TensorBoardWriter a(dir), b(dir);
  EXPECT_NE(a.path(), b.path());
  a.scalar("a", 1, 1.0);
  b.scalar("b", 1, 2.0);
  EXPECT_EQ(read_events(a.path()).size(), 2u);
  EXPECT_EQ(read_events(b.path()).size(), 2u);
  std::filesystem::remove_all(dir);
}

TEST(TensorBoard, UnwritableDirectoryNamesTheDirectory) {
  const std::string file = temp_dir("tensorboard-file");
  std::ofstream(file) << "not a directory";
  try {
    io::TensorBoardWriter tb(file + "/run");
    FAIL() << "expected tidal::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(file + "/run"), std::string::npos) << e.what();
  }
  EXPECT_THROW(io::TensorBoardWriter{file}, Error);  // a file where the directory should be
  std::filesystem::remove(file);
}

TEST(TensorBoard, ScalarsNeedAnObject) {
  const std::string dir = temp_dir("tensorboard-obj");
  io::TensorBoardWriter tb(dir);
  EXPECT_THROW(tb.scalars(nlohmann::json::array({1, 2}), 1), Error);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tidal
