// Progress for people: on a terminal a live line rewritten in place (step, loss, LR, tokens/s,
// ETA, peak memory); otherwise a plain line every `log_every` steps.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace tidal::engine {

struct StepReport {
  std::int64_t step, total_steps;
  double loss, lr, tokens_per_s, eta_s;
  std::uint64_t peak_bytes;             // host: parameters, gradients, optimizer state
  std::uint64_t peak_activation_bytes;  // the activation pool
};

class Progress {
 public:
  // out null = silent (ranks other than 0). live = false forces plain lines (under a launcher,
  // whose pseudo-terminal looks like a terminal but ends up in a log).
  Progress(std::FILE* out, std::int64_t log_every, bool live = true);
  void step(const StepReport& r);
  void line(const std::string& text);  // a message on its own line (evals, checkpoints)
  void finish();

 private:
  std::FILE* out_;
  bool tty_;
  std::int64_t log_every_;
  bool live_ = false;  // a live line is on screen
};

}  // namespace tidal::engine
