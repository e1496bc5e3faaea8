// Datasets: every sample is a pure function of (data seed, split, sample index), so a batch can
// be produced for any position (data-parallel ranks read their own slice; a resumed run reads
// exactly what the interrupted one would have).
#pragma once

#include "nn/context.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tidal::data {

enum class Split { train, eval };

class Dataset {
 public:
  virtual ~Dataset() = default;
  // `count` samples starting at `first` of `split`, as model inputs and targets.
  virtual nn::Batch batch(std::int64_t first, std::int64_t count, Split split) const = 0;
  // The lowest achievable mean loss per predicted token, when it is known in closed form.
  virtual std::optional<double> entropy_floor() const { return std::nullopt; }
  virtual std::string describe() const = 0;
  // The training samples at `first` ... `first + count - 1` as the data names them: a token
  // corpus's windows (a blend's source k's window w as k * 2^40 + w); elsewhere, samples being pure
  // functions of their index, the index itself. What train.log_samples reports.
  virtual std::vector<std::int64_t> sample_ids(std::int64_t first, std::int64_t count) const {
    std::vector<std::int64_t> out;
    for (std::int64_t i = first; i < first + count; ++i) out.push_back(i);
    return out;
  }
  // What the metrics report of the data once `samples` training samples are drawn (a blend: the
  // samples of each source); an empty object for nothing.
  virtual nlohmann::json record(std::int64_t samples) const {
    (void)samples;
    return nlohmann::json::object();
  }
};

}  // namespace tidal::data
