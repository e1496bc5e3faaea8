#include "data/markov.h"

#include "core/error.h"
#include "core/philox.h"

#include <algorithm>
#include <cmath>

namespace tidal::data {
namespace {

double uniform(std::uint64_t a, std::uint64_t b, std::uint32_t c, std::uint64_t seed, std::uint32_t stream) {
  const PhiloxCounter r = philox4x32({std::uint32_t(a), std::uint32_t(b), c, stream},
                                     {std::uint32_t(seed), std::uint32_t(seed >> 32) ^ 0x6d61726bu});
  // 53 random bits in (0, 1).
  return (double((std::uint64_t(r[0]) << 21) ^ r[1]) + 0.5) / 9007199254740992.0;
}

std::int64_t draw(const double* cumulative, std::int64_t n, double u) {
  return std::min<std::int64_t>(n - 1, std::upper_bound(cumulative, cumulative + n, u) - cumulative);
}

}  // namespace

MarkovDataset::MarkovDataset(std::int64_t states, int branching, std::int64_t seq_len, std::int64_t vocab_size,
                             Objective objective, std::uint64_t seed)
    : TokenDataset(seq_len, vocab_size, objective, seed), states_(states), branching_(branching) {
  const std::int64_t vocab = states;
  const std::size_t K = std::size_t(branching);
  next_.resize(std::size_t(vocab) * K);
  cumulative_.resize(std::size_t(vocab) * K);
  std::vector<double> p(std::size_t(vocab) * K);
  for (std::int64_t s = 0; s < vocab; ++s) {
    // K distinct successors, drawn by rejection.
    std::uint32_t attempt = 0;
    for (std::size_t k = 0; k < K; ++k) {
      std::int32_t t;
      do {
        t = std::int32_t(uniform(std::uint64_t(s), k, attempt++, seed, 1) * double(vocab));
      } while (std::find(next_.begin() + std::ptrdiff_t(std::size_t(s) * K), next_.begin() + std::ptrdiff_t(std::size_t(s) * K + k), t) !=
               next_.begin() + std::ptrdiff_t(std::size_t(s) * K + k));
      next_[std::size_t(s) * K + k] = t;
      p[std::size_t(s) * K + k] = -std::log(uniform(std::uint64_t(s), k, 0, seed, 2));  // Dirichlet(1)
    }
    double total = 0;
    for (std::size_t k = 0; k < K; ++k) total += p[std::size_t(s) * K + k];
    double acc = 0;
    for (std::size_t k = 0; k < K; ++k) {
      p[std::size_t(s) * K + k] /= total;
      acc += p[std::size_t(s) * K + k];
      cumulative_[std::size_t(s) * K + k] = acc;
    }
  }
  // Stationary distribution by power iteration, then the entropy rate.
  std::vector<double> pi(static_cast<std::size_t>(vocab), 1.0 / double(vocab)), nxt(static_cast<std::size_t>(vocab));
  for (int it = 0; it < 5000; ++it) {
    std::fill(nxt.begin(), nxt.end(), 0.0);
    for (std::int64_t s = 0; s < vocab; ++s)
      for (std::size_t k = 0; k < K; ++k)
        nxt[std::size_t(next_[std::size_t(s) * K + k])] += pi[std::size_t(s)] * p[std::size_t(s) * K + k];
    double diff = 0;
    for (std::int64_t s = 0; s < vocab; ++s) diff += std::fabs(nxt[std::size_t(s)] - pi[std::size_t(s)]);
    pi.swap(nxt);
    if (diff < 1e-13) break;
  }
  stationary_cumulative_.resize(std::size_t(vocab));
  double acc = 0;
  for (std::int64_t s = 0; s < vocab; ++s) {
    acc += pi[std::size_t(s)];
    stationary_cumulative_[std::size_t(s)] = acc;
    double h = 0;
    for (std::size_t k = 0; k < K; ++k) {
      const double q = p[std::size_t(s) * K + k];
      if (q > 0) h -= q * std::log(q);
    }
    entropy_rate_ += pi[std::size_t(s)] * h;
  }
  for (double& c : stationary_cumulative_) c /= acc;
}

TokenSample MarkovDataset::sample(std::int64_t index, Split split) const {
  const std::uint32_t stream = split == Split::train ? 10 : 11;
  std::vector<std::int32_t> seq(std::size_t(seq_len_ + 1));
  std::int64_t s = draw(stationary_cumulative_.data(), states_, uniform(std::uint64_t(index), 0, 0, seed_, stream));
  seq[0] = std::int32_t(s);
  for (std::int64_t t = 1; t <= seq_len_; ++t) {
    const double u = uniform(std::uint64_t(index), std::uint64_t(t), 1, seed_, stream);
    const std::int64_t k = draw(cumulative_.data() + s * branching_, branching_, u);
    s = next_[std::size_t(s * branching_ + k)];
    seq[std::size_t(t)] = std::int32_t(s);
  }
  TokenSample out;
  out.tokens = std::move(seq);
  return out;
}

std::string MarkovDataset::describe() const {
  return fmt::format("markov language: {} states, {} successors each, seed {}; entropy floor {:.4f} nats/token", states_,
                     branching_, seed_, entropy_rate_);
}

}  // namespace tidal::data
