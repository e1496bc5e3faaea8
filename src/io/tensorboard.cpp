#include "io/tensorboard.h"

#include "core/error.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>
#include <vector>

namespace tidal::io {

namespace {

// Reflected Castagnoli polynomial; one table entry per byte value.
constexpr std::uint32_t kCrc32cPoly = 0x82F63B78u;
// TFRecord stores CRCs masked, so that a CRC of data that itself holds CRCs stays well mixed.
constexpr std::uint32_t kCrcMaskDelta = 0xa282ead8u;

constexpr std::array<std::uint32_t, 256> make_crc32c_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1u) ? (c >> 1) ^ kCrc32cPoly : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<std::uint32_t, 256> kCrc32cTable = make_crc32c_table();

std::uint32_t masked_crc32c(const void* data, std::size_t size) {
  const std::uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + kCrcMaskDelta;
}

// Protocol buffer wire types of the fields written here.
constexpr int kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

// Event (tensorflow/core/util/event.proto) and Summary (tensorflow/core/framework/summary.proto)
// field numbers.
constexpr int kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5;
constexpr int kSummaryValue = 1;
constexpr int kValueTag = 1, kValueSimpleValue = 2;

void put_little_endian(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(char((v >> (8 * i)) & 0xffu));
}

void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80u) {
    out.push_back(char((v & 0x7fu) | 0x80u));
    v >>= 7;
  }
  out.push_back(char(v));
}

void put_key(std::string& out, int field, int wire_type) { put_varint(out, std::uint64_t(field) << 3 | std::uint64_t(wire_type)); }

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

void put_double(std::string& out, int field, double v) {
  std::uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, kFixed64);
  put_little_endian(out, bits, 8);
}

void put_float(std::string& out, int field, float v) {
  std::uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, kFixed32);
  put_little_endian(out, bits, 4);
}

// simple_value is a float: values beyond its range become +-inf rather than undefined behaviour.
float to_float(double v) {
  constexpr double kMax = std::numeric_limits<float>::max();
  if (v > kMax) return std::numeric_limits<float>::infinity();
  if (v < -kMax) return -std::numeric_limits<float>::infinity();
  return float(v);
}

double unix_seconds_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// An Event with wall_time = now and `step`; the caller appends its payload field.
std::string event_header(std::int64_t step) {
  std::string event;
  put_double(event, kEventWallTime, unix_seconds_now());
  put_key(event, kEventStep, kVarint);
  put_varint(event, std::uint64_t(step));  // negative steps: ten-byte two's complement, as protobuf does
  return event;
}

using Scalars = std::vector<std::pair<std::string, float>>;

std::string summary_event(std::int64_t step, const Scalars& values) {
  std::string summary;
  for (const auto& [tag, value] : values) {
    std::string v;
    put_bytes(v, kValueTag, tag);
    put_float(v, kValueSimpleValue, value);
    put_bytes(summary, kSummaryValue, v);
  }
  std::string event = event_header(step);
  put_bytes(event, kEventSummary, summary);
  return event;
}

void flatten(const nlohmann::json& node, const std::string& tag, Scalars& out) {
  if (node.is_boolean()) {
    out.emplace_back(tag, node.get<bool>() ? 1.0f : 0.0f);
  } else if (node.is_number()) {
    out.emplace_back(tag, to_float(node.get<double>()));
  } else if (node.is_object()) {
    for (const auto& [key, child] : node.items()) flatten(child, tag + "/" + key, out);
  } else if (node.is_array()) {
    for (std::size_t i = 0; i < node.size(); ++i) flatten(node[i], tag + "/" + std::to_string(i), out);
  }
  // strings, null and binary carry no scalar
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t crc = 0xffffffffu;
  for (std::size_t i = 0; i < size; ++i) crc = kCrc32cTable[(crc ^ p[i]) & 0xffu] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  TIDAL_CHECK(!ec && fs::is_directory(dir), "cannot create the TensorBoard directory '{}': {} (give a writable directory)",
              dir, ec ? ec.message() : "it exists and is not a directory");
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch()).count();
  const std::string base = fmt::format("events.out.tfevents.{}.{}.{}.tidal", seconds, host_name(), ::getpid());
  // A second writer of this process in the same second and directory must not truncate the first's file.
  path_ = (fs::path(dir) / base).string();
  for (int n = 1; fs::exists(path_); ++n) path_ = (fs::path(dir) / fmt::format("{}.{}", base, n)).string();
  out_.open(path_, std::ios::out | std::ios::binary | std::ios::trunc);
  TIDAL_CHECK(out_.good(), "cannot open the TensorBoard event file '{}' for writing: {} (give a writable directory)",
              path_, std::strerror(errno));
  std::string event = event_header(0);
  put_bytes(event, kEventFileVersion, "brain.Event:2");
  write_record(event);
}

TensorBoardWriter::~TensorBoardWriter() {
  if (out_.is_open()) out_.flush();  // never throws from a destructor; flush() reports failures
}

void TensorBoardWriter::scalar(const std::string& tag, std::int64_t step, double value) {
  write_record(summary_event(step, {{tag, to_float(value)}}));
}

void TensorBoardWriter::scalars(const nlohmann::json& record, std::int64_t step) {
  TIDAL_CHECK(record.is_object(), "TensorBoard scalars need a JSON object, got {} (pass the metrics record)",
              record.type_name());
  Scalars values;
  for (const auto& [key, child] : record.items())
    if (key != "step") flatten(child, key, values);
  if (!values.empty()) write_record(summary_event(step, values));
}

void TensorBoardWriter::flush() {
  out_.flush();
  TIDAL_CHECK(out_.good(), "cannot write the TensorBoard event file '{}' (check free space and permissions)", path_);
}

const std::string& TensorBoardWriter::path() const { return path_; }

// TFRecord framing: uint64 length, masked CRC of those 8 bytes, payload, masked CRC of the payload.
void TensorBoardWriter::write_record(const std::string& event) {
  std::string record;
  put_little_endian(record, event.size(), 8);
  put_little_endian(record, masked_crc32c(record.data(), 8), 4);
  record += event;
  put_little_endian(record, masked_crc32c(event.data(), event.size()), 4);
  out_.write(record.data(), std::streamsize(record.size()));
  flush();
}

}  // namespace tidal::io
