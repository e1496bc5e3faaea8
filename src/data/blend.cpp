#include "data/blend.h"

#include "core/error.h"

#include <cmath>
#include <cstdlib>
#include <numeric>
#include <sstream>

namespace tidal::data {

Blend::Blend(std::vector<double> weights) : weights_(std::move(weights)), counts_(weights_.size(), 0) {
  TIDAL_ASSERT(!weights_.empty(), "a blend of no sources");
  const double total = std::accumulate(weights_.begin(), weights_.end(), 0.0);
  for (double& w : weights_) w /= total;
  kept_.push_back(counts_);
}

int Blend::step() const {
  const double i = double(std::max<std::int64_t>(at_, 1));
  int best = 0;
  double most = weights_[0] * i - double(counts_[0]);
  for (std::size_t k = 1; k < weights_.size(); ++k) {
    const double error = weights_[k] * i - double(counts_[k]);
    if (error > most) {
      most = error;
      best = int(k);
    }
  }
  ++counts_[std::size_t(best)];
  if (++at_ % kEvery == 0 && std::size_t(at_ / kEvery) == kept_.size()) kept_.push_back(counts_);
  return best;
}

void Blend::seek(std::int64_t i) const {
  if (i < at_ || i - at_ > kEvery) {
    // From the kept state at or before i, reaching it first where needed.
    const std::size_t k = std::min(kept_.size() - 1, std::size_t(i / kEvery));
    at_ = std::int64_t(k) * kEvery;
    counts_ = kept_[k];
  }
  while (at_ < i) step();
}

std::pair<int, std::int64_t> Blend::at(std::int64_t i) const {
  seek(i);
  const int source = step();
  return {source, counts_[std::size_t(source)] - 1};
}

std::vector<std::int64_t> Blend::drawn(std::int64_t n) const {
  seek(n);
  return counts_;
}

std::vector<std::pair<double, std::string>> parse_blend(const std::string& spec, const std::string& key) {
  std::istringstream in(spec);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  const auto number = [](const std::string& w, double& out) {
    char* end = nullptr;
    out = std::strtod(w.c_str(), &end);
    return !w.empty() && end == w.c_str() + w.size();
  };
  double first = 0;
  if (words.size() < 2 || !number(words[0], first)) return {{1.0, spec}};
  TIDAL_CHECK(words.size() % 2 == 0, "{} = \"{}\": a blend is pairs of a weight and a path (\"0.7 a.bin 0.3 b.bin\"), "
              "and this has {} words", key, spec, words.size());
  std::vector<std::pair<double, std::string>> out;
  for (std::size_t i = 0; i < words.size(); i += 2) {
    double w = 0;
    TIDAL_CHECK(number(words[i], w) && w > 0 && std::isfinite(w), "{} = \"{}\": '{}' should be the weight of '{}', a "
                "number above zero", key, spec, words[i], words[i + 1]);
    out.push_back({w, words[i + 1]});
  }
  return out;
}

}  // namespace tidal::data
