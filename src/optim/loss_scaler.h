// Dynamic loss scaling for fp16 training (mixed-precision training as PyTorch's GradScaler does
// it): the loss is multiplied by the scale before backward, so that small gradients stay above
// fp16's smallest normal; the optimizer divides it out again. A step whose gradient is not finite
// (on any rank: the caller's check is reduced over them) is skipped and the scale lowered; after
// `window` finite steps in a row it is raised.
#pragma once

#include <cstdint>

namespace tidal::optim {

struct LossScalerOptions {
  double initial = 65536.0;  // 2^16
  std::int64_t window = 1000;  // finite steps before the scale grows
  double growth = 2.0;
  double backoff = 0.5;
  double min_scale = 1.0;  // never below: an overflow at 1 is a diverged run, not a scale problem
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerOptions& options = {});

  double scale() const { return scale_; }
  std::int64_t good_steps() const { return good_steps_; }  // finite steps since the last change
  // Records a step's gradient; returns whether the step is applied (it was finite).
  bool update(bool finite);
  // Continues a run that stopped with this scale and count (a checkpoint).
  void restore(double scale, std::int64_t good_steps);

 private:
  LossScalerOptions options_;
  double scale_;
  std::int64_t good_steps_ = 0;
};

}  // namespace tidal::optim
