#include "optim/loss_scaler.h"

#include "core/error.h"

#include <algorithm>

namespace tidal::optim {

LossScaler::LossScaler(const LossScalerOptions& options) : options_(options), scale_(options.initial) {
  TIDAL_CHECK(options_.initial > 0 && options_.window >= 1, "loss scale {} (window {}): must be > 0 (window >= 1)",
              options_.initial, options_.window);
}

bool LossScaler::update(bool finite) {
  if (!finite) {
    scale_ = std::max(options_.min_scale, scale_ * options_.backoff);
    good_steps_ = 0;
    return false;
  }
  if (++good_steps_ >= options_.window) {
    scale_ *= options_.growth;
    good_steps_ = 0;
  }
  return true;
}

void LossScaler::restore(double scale, std::int64_t good_steps) {
  TIDAL_CHECK(scale > 0 && good_steps >= 0, "loss scale {} with {} good steps cannot be restored", scale, good_steps);
  scale_ = scale;
  good_steps_ = good_steps;
}

}  // namespace tidal::optim
