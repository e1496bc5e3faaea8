// Datasets: every sample is a pure function of (data seed, split, sample index), so a batch can
// be produced for any position (data-parallel ranks read their own slice; a resumed run reads
// exactly what the interrupted one would have).
#pragma once

#include "config/config.h"
#include "nn/context.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

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
};

std::unique_ptr<Dataset> make_dataset(const config::Config& cfg);

}  // namespace tidal::data
