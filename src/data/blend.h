// A blend of datasets by weight (Megatron's --data-path "0.7 a 0.3 b"): blend sample i comes from
// the source whose share so far lags its weight most (Megatron-Core's build_blending_indices:
// argmax over k of w_k * max(i, 1) - drawn_k, the first on a tie), and is that source's next own
// sample. A pure function of the weights: every rank, and every resume, under any layout, draws
// the same sources; each source's share of any prefix is within a sample of its weight's.
// Random access replays from the nearest of the states kept every 2^16 samples, so sequential
// reads cost O(1) a sample and any position O(2^16) once.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tidal::data {

class Blend {
 public:
  explicit Blend(std::vector<double> weights);  // normalized here; each > 0

  // Blend sample i: the source and that source's own sample number.
  std::pair<int, std::int64_t> at(std::int64_t i) const;
  // The samples of each source among the first n.
  std::vector<std::int64_t> drawn(std::int64_t n) const;
  const std::vector<double>& weights() const { return weights_; }

 private:
  static constexpr std::int64_t kEvery = std::int64_t(1) << 16;
  // The cursor at sample i (its counts before i), moved there from the nearest kept state.
  void seek(std::int64_t i) const;
  // One sample drawn at the cursor: its source.
  int step() const;

  std::vector<double> weights_;
  // The state at samples 0, kEvery, 2 kEvery, ... (counts before each), as far as reached.
  mutable std::vector<std::vector<std::int64_t>> kept_;
  mutable std::int64_t at_ = 0;
  mutable std::vector<std::int64_t> counts_;
};

// data.path's blend form, "W1 PATH1 W2 PATH2 ...": (weight, path) pairs; one pair of weight 1 when
// `spec` is a single path. tidal::Error naming `key` for a malformed blend.
std::vector<std::pair<double, std::string>> parse_blend(const std::string& spec, const std::string& key);

}  // namespace tidal::data
