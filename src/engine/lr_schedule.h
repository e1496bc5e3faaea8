// Learning rate: linear warm-up to the peak, then cosine decay to min_lr at the last step.
#pragma once

#include <cmath>
#include <cstdint>

namespace tidal::engine {

struct LrSchedule {
  double lr, min_lr;
  std::int64_t warmup_steps, total_steps;

  // Rate for step `step` (0-based).
  double at(std::int64_t step) const {
    if (step < warmup_steps) return lr * double(step + 1) / double(warmup_steps);
    const std::int64_t decay = total_steps - warmup_steps;
    if (decay <= 1) return lr;
    const double progress = double(step - warmup_steps) / double(decay - 1);
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(3.141592653589793 * std::min(1.0, progress)));
  }
};

}  // namespace tidal::engine
