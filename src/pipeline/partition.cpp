#include "pipeline/partition.h"

#include "core/error.h"

#include <algorithm>
#include <limits>

namespace tidal::pipeline {

std::vector<int> partition(const std::vector<double>& costs, int stages) {
  const int n = int(costs.size());
  std::vector<double> prefix(n + 1, 0.0);
  std::vector<int> positive(n + 1, 0);  // positive-cost layers among the first i
  for (int i = 0; i < n; ++i) {
    prefix[i + 1] = prefix[i] + costs[i];
    positive[i + 1] = positive[i] + (costs[i] > 0);
  }
  TIDAL_CHECK(stages >= 1 && positive[n] >= stages,
              "{} pipeline stages for {} block layers: every stage needs at least one; use more layers (model.n_layer), "
              "fewer stages (parallel.pipeline x parallel.virtual_stages) or shorter checkpointed runs "
              "(train.activation_checkpointing_k)",
              stages, positive[n]);
  constexpr double kNone = std::numeric_limits<double>::infinity();
  auto cost = [&](int j, int i) { return prefix[i] - prefix[j]; };  // units [j, i)
  // 1. The smallest maximum stage cost: worst[k][i] over the splits of the first i units into k
  //    stages.
  std::vector<std::vector<double>> worst(stages + 1, std::vector<double>(n + 1, kNone));
  worst[0][0] = 0;
  for (int k = 1; k <= stages; ++k)
    for (int i = 1; i <= n; ++i)
      for (int j = i - 1; j >= 0; --j)  // the last stage runs units [j, i)
        if (worst[k - 1][j] != kNone && positive[i] > positive[j])
          worst[k][i] = std::min(worst[k][i], std::max(worst[k - 1][j], cost(j, i)));
  // 2. Among the splits within that maximum, the most even one: the least sum of squared stage
  //    costs (so the stages short of the bottleneck share the rest evenly); ties go to the split
  //    found first, which puts cost earliest.
  const double limit = worst[stages][n] * (1 + 1e-12);
  std::vector<std::vector<double>> squares(stages + 1, std::vector<double>(n + 1, kNone));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(n + 1, 0));
  squares[0][0] = 0;
  for (int k = 1; k <= stages; ++k)
    for (int i = 1; i <= n; ++i)
      for (int j = i - 1; j >= 0; --j) {
        if (squares[k - 1][j] == kNone || positive[i] == positive[j] || cost(j, i) > limit) continue;
        const double total = squares[k - 1][j] + cost(j, i) * cost(j, i);
        if (total < squares[k][i]) squares[k][i] = total, cut[k][i] = j;
      }
  std::vector<int> bounds(stages + 1, n);
  for (int k = stages, i = n; k > 0; --k) i = bounds[k - 1] = cut[k][i];
  return bounds;
}

}  // namespace tidal::pipeline
