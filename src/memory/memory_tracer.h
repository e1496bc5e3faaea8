// The runtime memory tracer (patrickstar-v2 sec. 7.1, Fig. 9). An iteration is a sequence of
// moments - an operator that uses chunks starts - and the interval from one moment to the next.
// The warm-up iteration records, per interval, the peak of the device tier's bytes R, the chunk
// bytes C on the device during it, and so the non-model bytes N = R - C, and the bytes P of the
// chunks its operator computes with; and, per chunk, the moments it is used at. Later iterations repeat the same operators in the same order, so moment
// j of any iteration is moment j of the warm-up: the eviction reads N_j to know how much of the
// device the chunks may take during interval j, and a chunk's next use to choose a victim.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace tidal::memory {

class MemoryTracer {
 public:
  static constexpr int kNever = std::numeric_limits<int>::max();

  // Recording (the warm-up iteration): a moment starts with the label of its operator; the
  // chunks it uses are noted; the interval closes at the next moment or at the iteration's end
  // with the peak device bytes seen in it and the chunk bytes held during it.
  void record_moment(std::string label);
  void record_use(int chunk);
  // The bytes of the param chunks the moment's operator computes with (the largest given).
  void record_operator_bytes(std::int64_t bytes);
  void close_interval(std::int64_t device_peak, std::int64_t chunk_bytes);
  // The warm-up is over: the sequence is fixed.
  void finish();
  bool finished() const { return finished_; }

  int moments() const { return int(non_model_.size()); }
  const std::string& label(int j) const { return labels_.at(std::size_t(j)); }
  // Peak non-model bytes during interval j (past the end: the largest of all).
  std::int64_t non_model(int j) const;
  std::int64_t peak_non_model() const { return peak_non_model_; }
  // The first moment after `j` that uses `chunk`, counting on into the next iteration (a use at
  // moment k of the next one is moments() + k); kNever if the chunk is not used at all.
  // Binary search: O(log T) per chunk.
  int next_use(int chunk, int j) const;

  // The least device capacity L under which every interval fits: its operator's chunks P_j beside
  // its non-model peak N_j (every other chunk can wait on the host); and the moment that sets it.
  struct Least {
    std::int64_t bytes = 0;
    int moment = -1;
  };
  Least least_limit() const;
  std::int64_t operator_bytes(int j) const { return operator_.at(std::size_t(j)); }

  // The tide (Fig. 2): per moment its operator, device, chunk and non-model bytes.
  nlohmann::json json() const;

 private:
  std::vector<std::string> labels_;
  std::vector<std::int64_t> device_, chunk_, non_model_, operator_;
  std::vector<std::vector<int>> uses_;  // per chunk, ascending moments
  std::int64_t peak_non_model_ = 0;
  bool finished_ = false;
};

}  // namespace tidal::memory
