#include "nn/router.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <tuple>

namespace tidal::nn {
namespace {

std::int64_t capacity_of(std::int64_t N, const RouterOptions& opt) {
  if (opt.capacity_factor <= 0) return N;  // an expert never takes a token twice
  return std::int64_t(std::ceil(opt.capacity_factor * double(N) * opt.top_k / opt.experts));
}

// Slots for the accepted picks, expert-major and in token order within an expert. A pick is
// accepted while its expert has room, first picks of every token before second picks (GShard's
// priority), tokens in order.
void assign_slots(Routing& r, const RouterOptions& opt) {
  const std::int64_t N = r.tokens, k = opt.top_k, E = opt.experts, cap = capacity_of(N, opt);
  r.slot.assign(std::size_t(N * k), -1);
  std::vector<std::int64_t> taken(std::size_t(E), 0);
  for (std::int64_t j = 0; j < k; ++j)
    for (std::int64_t n = 0; n < N; ++n) {
      const std::int32_t e = r.expert[std::size_t(n * k + j)];
      if (taken[std::size_t(e)] < cap) {
        ++taken[std::size_t(e)];
        r.slot[std::size_t(n * k + j)] = 0;  // accepted; numbered below
      } else {
        r.dropped += 1;
      }
    }
  r.offset.assign(std::size_t(E + 1), 0);
  r.kept = taken;
  for (std::int64_t e = 0; e < E; ++e)
    r.offset[std::size_t(e + 1)] =
        r.offset[std::size_t(e)] + (opt.pad ? padded_rows(taken[std::size_t(e)]) : taken[std::size_t(e)]);
  const std::int64_t P = r.offset[std::size_t(E)];
  r.token.assign(std::size_t(P), -1);
  r.slot_weight.assign(std::size_t(P), 0.0f);
  std::vector<std::int64_t> next(r.offset.begin(), r.offset.end() - 1);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t j = 0; j < k; ++j) {
      const std::size_t i = std::size_t(n * k + j);
      if (r.slot[i] < 0) continue;
      const std::int64_t p = next[std::size_t(r.expert[i])]++;
      r.slot[i] = std::int32_t(p);
      r.token[std::size_t(p)] = std::int32_t(n);
      r.slot_weight[std::size_t(p)] = r.weight[i];
    }
}

}  // namespace

// Up to 64 rows, a multiple of 8; above, a multiple of an eighth of the power of two below.
std::int64_t padded_rows(std::int64_t picks) {
  if (picks <= 0) return 0;
  std::int64_t octave = 64;
  while (octave * 2 <= picks) octave *= 2;
  const std::int64_t step = picks <= 64 ? 8 : octave / 8;
  return (picks + step - 1) / step * step;
}

Routing route(const float* logits, std::int64_t N, const RouterOptions& opt) {
  const std::int64_t E = opt.experts, k = opt.top_k;
  TIDAL_ASSERT(E > 0 && k > 0 && k <= E, "router: top {} of {} experts", k, E);
  Routing r;
  r.tokens = N;
  r.probs.resize(std::size_t(N * E));
  r.lse.resize(std::size_t(N));
  r.expert.resize(std::size_t(N * k));
  r.weight.resize(std::size_t(N * k));
  r.chosen.assign(std::size_t(E), 0.0);
  r.prob_sum.assign(std::size_t(E), 0.0);
  // Each token on its own, in parallel; the sums over tokens after, in token order (the same
  // values at any thread count).
#pragma omp parallel
  {
    std::vector<std::int32_t> order(static_cast<std::size_t>(E));
    std::vector<double> exps(static_cast<std::size_t>(E));
#pragma omp for schedule(static)
    for (std::int64_t n = 0; n < N; ++n) {
      const float* l = logits + n * E;
      float* p = r.probs.data() + n * E;
      const float top = *std::max_element(l, l + E);
      double sum = 0;
      for (std::int64_t e = 0; e < E; ++e) {
        exps[std::size_t(e)] = std::exp(double(l[e] - top));
        sum += exps[std::size_t(e)];
      }
      for (std::int64_t e = 0; e < E; ++e) p[e] = float(exps[std::size_t(e)] / sum);
      r.lse[std::size_t(n)] = float(double(top) + std::log(sum));
      // The k most probable, ties to the lower index.
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](std::int32_t a, std::int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
      double picked = 0;
      for (std::int64_t j = 0; j < k; ++j) picked += p[order[std::size_t(j)]];
      for (std::int64_t j = 0; j < k; ++j) {
        const std::int32_t e = order[std::size_t(j)];
        r.expert[std::size_t(n * k + j)] = e;
        r.weight[std::size_t(n * k + j)] = opt.normalize ? float(p[e] / picked) : p[e];
      }
    }
  }
  for (std::int64_t n = 0; n < N; ++n) {
    r.lse_squares += double(r.lse[std::size_t(n)]) * r.lse[std::size_t(n)];
    for (std::int64_t j = 0; j < k; ++j) r.chosen[std::size_t(r.expert[std::size_t(n * k + j)])] += 1;
    for (std::int64_t e = 0; e < E; ++e) r.prob_sum[std::size_t(e)] += r.probs[std::size_t(n * E + e)];
  }
  assign_slots(r, opt);
  return r;
}

std::shared_ptr<const Routing> planned_routing(std::int64_t N, const RouterOptions& opt) {
  using Key = std::tuple<std::int64_t, int, int, bool, double, bool>;
  const Key key{N, opt.experts, opt.top_k, opt.normalize, opt.capacity_factor, opt.pad};
  thread_local std::map<Key, std::shared_ptr<const Routing>> made;
  if (const auto it = made.find(key); it != made.end()) return it->second;
  const std::int64_t E = opt.experts, k = opt.top_k;
  auto r = std::make_shared<Routing>();
  r->tokens = N;
  r->expert.resize(std::size_t(N * k));
  r->weight.assign(std::size_t(N * k), 1.0f / float(k));
  r->chosen.assign(std::size_t(E), 0.0);
  r->prob_sum.assign(std::size_t(E), double(N) / double(E));
  for (std::int64_t i = 0; i < N * k; ++i) {  // token n's picks are k consecutive experts: all distinct
    r->expert[std::size_t(i)] = std::int32_t(i % E);
    r->chosen[std::size_t(i % E)] += 1;
  }
  assign_slots(*r, opt);
  if (made.size() >= 8) made.clear();  // a plan's few sizes (micro-batches, sequence shares)
  return made[key] = std::move(r);
}

std::vector<double> replica_statistics(const Routing& r) {
  std::vector<double> s(r.chosen);
  s.insert(s.end(), r.prob_sum.begin(), r.prob_sum.end());
  s.push_back(double(r.tokens));
  s.push_back(r.lse_squares);
  return s;
}

RouterLosses router_losses(const std::vector<double>& replica, int experts) {
  const std::size_t E = std::size_t(experts);
  TIDAL_ASSERT(replica.size() == 2 * E + 2, "router statistics of {} values for {} experts", replica.size(), E);
  const double N = replica[2 * E];
  RouterLosses l;
  if (N <= 0) return l;
  for (std::size_t e = 0; e < E; ++e) l.balance += replica[e] * replica[E + e];
  l.balance *= double(experts) / (N * N);
  l.z = replica[2 * E + 1] / N;
  return l;
}

std::vector<float> router_backward(const Routing& r, const RouterOptions& opt, const float* dweight,
                                   const std::vector<double>& replica, double balance_scale, double z_scale) {
  const std::int64_t N = r.tokens, E = opt.experts, k = opt.top_k;
  const double tokens = replica[std::size_t(2 * E)];
  std::vector<float> dlogits(static_cast<std::size_t>(N * E));
#pragma omp parallel
  {
    std::vector<double> dp(static_cast<std::size_t>(E));
#pragma omp for schedule(static)
    for (std::int64_t n = 0; n < N; ++n) {
      const float* p = r.probs.data() + n * E;
      // d balance / d p_e = E chosen_e / N^2, the same for every token.
      for (std::int64_t e = 0; e < E; ++e)
        dp[std::size_t(e)] = tokens > 0 ? balance_scale * double(E) * replica[std::size_t(e)] / (tokens * tokens) : 0.0;
      // w_j = p_{e_j} / s with s the picks' sum: d p_{e_j} += (dw_j - sum_i dw_i w_i) / s.
      double through = 0, picked = 0;
      for (std::int64_t j = 0; j < k; ++j) {
        through += double(dweight[n * k + j]) * r.weight[std::size_t(n * k + j)];
        picked += p[r.expert[std::size_t(n * k + j)]];
      }
      for (std::int64_t j = 0; j < k; ++j) {
        const double dw = dweight[n * k + j];
        dp[std::size_t(r.expert[std::size_t(n * k + j)])] += opt.normalize ? (dw - through) / picked : dw;
      }
      // Through the softmax: dl_e = p_e (dp_e - sum_f p_f dp_f); the z-loss adds 2 lse p_e / N.
      double mean = 0;
      for (std::int64_t e = 0; e < E; ++e) mean += double(p[e]) * dp[std::size_t(e)];
      const double z = tokens > 0 ? z_scale * 2.0 * r.lse[std::size_t(n)] / tokens : 0.0;
      for (std::int64_t e = 0; e < E; ++e)
        dlogits[std::size_t(n * E + e)] = float(double(p[e]) * (dp[std::size_t(e)] - mean + z));
    }
  }
  return dlogits;
}

}  // namespace tidal::nn
