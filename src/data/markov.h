// The built-in synthetic language: a seeded random Markov chain over the vocabulary, each state
// with a few successors (sparse transitions) weighted by Dirichlet(1) draws. Sequences start
// from the stationary distribution, so every next-token prediction has the same best possible
// loss: the chain's entropy rate H = sum_s pi_s H(P_s), known in closed form.
#pragma once

#include "data/token_dataset.h"

#include <vector>

namespace tidal::data {

class MarkovDataset final : public TokenDataset {
 public:
  // `states` is the chain's vocabulary (model.vocab_size, less the mask id for BERT).
  MarkovDataset(std::int64_t states, int branching, std::int64_t seq_len, std::int64_t vocab, Objective objective,
                std::uint64_t seed);

  // The floor holds for next-token prediction.
  std::optional<double> entropy_floor() const override {
    return objective_ == Objective::causal ? std::optional<double>(entropy_rate_) : std::nullopt;
  }
  std::string describe() const override;
  TokenSample sample(std::int64_t index, Split split) const override;

 private:
  std::int64_t states_;
  int branching_;
  std::vector<std::int32_t> next_;   // [vocab, branching] successor states
  std::vector<double> cumulative_;   // [vocab, branching] cumulative transition probabilities
  std::vector<double> stationary_cumulative_;  // [vocab]
  double entropy_rate_ = 0.0;
};

}  // namespace tidal::data
