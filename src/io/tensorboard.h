// TensorBoard event files written without protobuf or TensorFlow: a TFRecord stream of Event
// protocol buffers, of which only the few fields TensorBoard needs for scalars are encoded by hand.
// Invariant: every record on disk is complete (length, masked CRC32C of the length, payload,
// masked CRC32C of the payload) once scalar() / scalars() / flush() return.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

namespace tidal::io {

// CRC-32C (Castagnoli) of `size` bytes: the checksum TFRecord framing uses (before masking).
std::uint32_t crc32c(const void* data, std::size_t size);

// TensorBoard event files (what tensorboard's EventFileLoader / EventAccumulator read): a TFRecord
// stream of Event protocol buffers, encoded by hand (a handful of fields; no protobuf library).
class TensorBoardWriter {
 public:
  // Creates `dir` (and parents) if missing; opens dir/events.out.tfevents.<unix seconds>.<hostname>.<pid>.tidal
  // and writes the file_version event ("brain.Event:2"). Throws tidal::Error (core/error.h, with a message naming the dir and the fix) when it cannot.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();  // flushes
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;
  // One scalar summary event (Event.summary.value{tag, simple_value}) at `step`, wall_time = now.
  void scalar(const std::string& tag, std::int64_t step, double value);
  // Every number in `record` (a flat or nested JSON object) as a scalar at `step`: nested keys joined with "/",
  // array elements as "<key>/<index>", booleans as 0/1; strings and null skipped; the key "step" itself skipped.
  void scalars(const nlohmann::json& record, std::int64_t step);
  void flush();
  const std::string& path() const;

 private:
  void write_record(const std::string& event);

  std::string path_;
  std::ofstream out_;
};

}  // namespace tidal::io
