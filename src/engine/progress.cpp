#include "core/bytes.h"
#include "engine/progress.h"

#include <fmt/format.h>
#include <unistd.h>

namespace tidal::engine {

Progress::Progress(std::FILE* out, std::int64_t log_every, bool live)
    : out_(out), tty_(live && out && ::isatty(::fileno(out)) != 0), log_every_(log_every) {}

void Progress::step(const StepReport& r) {
  if (!out_) return;
  const std::int64_t eta = std::int64_t(r.eta_s);
  const std::string text =
      fmt::format("step {:>{}}/{} | loss {:.4f} | lr {:.2e} | {:.0f} tok/s | ETA {}:{:02d} | peak {} + act {}", r.step,
                  std::to_string(r.total_steps).size(), r.total_steps, r.loss, r.lr, r.tokens_per_s, eta / 60, eta % 60,
                  human_bytes(r.peak_bytes), human_bytes(r.peak_activation_bytes));
  if (tty_) {
    fmt::print(out_, "\r\033[K{}", text);
    live_ = true;
  } else if (r.step % log_every_ == 0 || r.step == r.total_steps || r.step == 1) {
    fmt::print(out_, "{}\n", text);
  }
  std::fflush(out_);
}

void Progress::line(const std::string& text) {
  if (!out_) return;
  if (live_) fmt::print(out_, "\n");
  live_ = false;
  fmt::print(out_, "{}\n", text);
  std::fflush(out_);
}

void Progress::finish() {
  if (!out_) return;
  if (live_) fmt::print(out_, "\n");
  live_ = false;
}

}  // namespace tidal::engine
