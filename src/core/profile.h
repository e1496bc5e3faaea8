// Where a training step's time goes (train.profile): wall seconds per op family and per module
// kind, recorded while a StepProfile is active on this process.
//
// - An op family's time is the time inside its outermost op call on each thread: an op that
//   calls another op charges the whole call to the outer family, so the families never overlap
//   and their sum is at most the step time (the rest is "outside ops": framework, allocation).
// - A module kind's time is self time: a module call's time less the calls of its children, so
//   the kinds never overlap either.
// - Modules run at once on the host's threads (nn::Runner::forward_concurrently) count a share
//   of each thread's time, 1 / threads, so that the region's figures still sum to about its
//   wall time; the module that started the region does not count it as its own.
// - CPU wall time. A GPU op's launch returns before the kernel ends, so under train.device =
//   cuda the figures are launch times, and "outside ops" holds the waits.
// Off (no active profile), an op pays one relaxed atomic load.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <typeinfo>

namespace tidal {

enum class OpFamily : int {
  gemm,
  attention,      // attention's kernels, a ring's blocks included
  layernorm,      // LayerNorm and RMSNorm
  gelu,           // GELU and SwiGLU (the MLPs' activations)
  cross_entropy,  // softmax cross-entropy (and the plain softmax op)
  optimizer,      // AdamW / SGD updates, gradient norms and scaling
  copy_cast,      // dtype casts and tensor copies
  elementwise,    // bias, residual, dropout, embedding lookups and the other small ops
  communication,  // waiting for collectives and point-to-point transfers
};
inline constexpr int kOpFamilies = 9;
const char* op_family_name(OpFamily f);

// The family of an op by its name (the name of its ops:: function).
constexpr OpFamily op_family_of(std::string_view op) {
  auto starts = [&](std::string_view p) { return op.substr(0, p.size()) == p; };
  if (starts("gemm")) return OpFamily::gemm;
  if (starts("attention") || starts("ring_attention")) return OpFamily::attention;
  if (starts("layernorm") || starts("rms_norm") || starts("split_norm")) return OpFamily::layernorm;
  if (starts("gelu") || starts("swiglu")) return OpFamily::gelu;
  if (starts("cross_entropy") || starts("softmax")) return OpFamily::cross_entropy;
  if (starts("adamw") || starts("sgd") || op == "scale" || op == "sum_of_squares") return OpFamily::optimizer;
  if (starts("cast") || starts("copy")) return OpFamily::copy_cast;
  return OpFamily::elementwise;
}

// Accumulated seconds; thread safe.
class StepProfile {
 public:
  struct Totals {
    std::array<double, kOpFamilies> ops{};
    std::map<std::string, double> modules;  // module kind ("Linear", "SelfAttention") -> self seconds
  };
  void add_op(OpFamily f, double seconds);
  void add_module(const std::string& kind, double seconds);
  // What was recorded since the last take, and starts again from zero.
  Totals take();

 private:
  std::mutex mutex_;
  Totals totals_;
};

// The profile recording now, or null.
StepProfile* active_profile();

// Makes `profile` the active one for its lifetime (one at a time).
class ProfileRecording {
 public:
  explicit ProfileRecording(StepProfile& profile);
  ~ProfileRecording();
  ProfileRecording(const ProfileRecording&) = delete;
  ProfileRecording& operator=(const ProfileRecording&) = delete;
};

// Times the op call it lives in, when a profile is active and no op is running on this thread.
class OpTimer {
 public:
  explicit OpTimer(OpFamily family);
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  StepProfile* profile_ = nullptr;  // null: not timing (off, or nested in another op)
  OpFamily family_;
  std::chrono::steady_clock::time_point start_;
};

class ModuleTimer;

// Around a parallel region whose threads each run whole modules (nn::Runner::run_concurrently):
// made on the calling thread before the region, a Share on every thread of it.
class ConcurrentProfile {
 public:
  ConcurrentProfile();
  ~ConcurrentProfile();  // the region's wall time is the calling module's children's
  ConcurrentProfile(const ConcurrentProfile&) = delete;
  ConcurrentProfile& operator=(const ConcurrentProfile&) = delete;

  // This thread's times count 1 / threads, and its modules have no parent, while it lives.
  class Share {
   public:
    explicit Share(int threads);
    ~Share();
    Share(const Share&) = delete;
    Share& operator=(const Share&) = delete;

   private:
    double share_;
    ModuleTimer* top_;
  };

 private:
  ModuleTimer* caller_;
  std::chrono::steady_clock::time_point start_;
};

// Times one module call's self time (the Runner makes one per forward and backward).
class ModuleTimer {
 public:
  explicit ModuleTimer(const std::type_info& kind);
  ~ModuleTimer();
  ModuleTimer(const ModuleTimer&) = delete;
  ModuleTimer& operator=(const ModuleTimer&) = delete;

 private:
  friend class ConcurrentProfile;
  StepProfile* profile_ = nullptr;
  const std::type_info* kind_;
  ModuleTimer* parent_ = nullptr;
  double children_s_ = 0.0;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tidal
