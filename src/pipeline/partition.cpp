#include "pipeline/partition.h"

#include "core/error.h"

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
              "{} pipeline stages for {} transformer blocks: every stage needs at least one block; use more layers "
              "(model.n_layer) or fewer stages (parallel.pipeline x parallel.virtual_stages)",
              stages, positive[n]);
  constexpr double kNone = std::numeric_limits<double>::infinity();
  // best[k][i]: the smallest maximum stage cost splitting the first i layers into k stages;
  // cut[k][i]: where the last of those stages begins.
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(n + 1, kNone));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= stages; ++k)
    for (int i = 1; i <= n; ++i)
      for (int j = i - 1; j >= 0; --j) {  // the last stage runs layers [j, i)
        if (best[k - 1][j] == kNone || positive[i] - positive[j] == 0) continue;
        const double worst = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (worst < best[k][i]) best[k][i] = worst, cut[k][i] = j;
      }
  std::vector<int> bounds(stages + 1, n);
  for (int k = stages, i = n; k > 0; --k) i = bounds[k - 1] = cut[k][i];
  return bounds;
}

}  // namespace tidal::pipeline
