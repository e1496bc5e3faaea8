#include "core/profile.h"

#include "core/error.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <typeindex>
#include <unordered_map>

namespace tidal {
namespace {

std::atomic<StepProfile*> g_active{nullptr};
thread_local int t_op_depth = 0;                    // ops running on this thread
thread_local ModuleTimer* t_module_top = nullptr;  // innermost module call on this thread
thread_local double t_share = 1.0;                  // what this thread's seconds count (ConcurrentProfile)

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// "tidal::nn::tp::ColumnParallelLinear" -> "ColumnParallelLinear"
std::string demangled_kind(const std::type_info& type) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(type.name(), nullptr, nullptr, &status),
                                                   std::free);
  std::string name = status == 0 ? demangled.get() : type.name();
  const auto colon = name.rfind("::");
  return colon == std::string::npos ? name : name.substr(colon + 2);
}

// The kind's name, demangled once per type and thread (a step makes hundreds of module calls).
const std::string& kind_name(const std::type_info& type) {
  thread_local std::unordered_map<std::type_index, std::string> names;
  auto it = names.find(type);
  if (it == names.end()) it = names.emplace(type, demangled_kind(type)).first;
  return it->second;
}

}  // namespace

const char* op_family_name(OpFamily f) {
  switch (f) {
    case OpFamily::gemm: return "gemm";
    case OpFamily::attention: return "attention";
    case OpFamily::layernorm: return "layernorm";
    case OpFamily::gelu: return "gelu";
    case OpFamily::cross_entropy: return "cross_entropy";
    case OpFamily::optimizer: return "optimizer";
    case OpFamily::copy_cast: return "copy_cast";
    case OpFamily::elementwise: return "elementwise";
    case OpFamily::communication: return "communication";
  }
  return "?";
}

void StepProfile::add_op(OpFamily f, double seconds) {
  std::lock_guard lock(mutex_);
  totals_.ops[std::size_t(f)] += seconds;
}

void StepProfile::add_module(const std::string& kind, double seconds) {
  std::lock_guard lock(mutex_);
  totals_.modules[kind] += seconds;
}

StepProfile::Totals StepProfile::take() {
  std::lock_guard lock(mutex_);
  Totals out = std::move(totals_);
  totals_ = Totals{};
  return out;
}

StepProfile* active_profile() { return g_active.load(std::memory_order_relaxed); }

ProfileRecording::ProfileRecording(StepProfile& profile) {
  StepProfile* expected = nullptr;
  TIDAL_ASSERT(g_active.compare_exchange_strong(expected, &profile), "a profile is already recording");
}

ProfileRecording::~ProfileRecording() { g_active.store(nullptr); }

OpTimer::OpTimer(OpFamily family) : family_(family) {
  if (t_op_depth++ > 0) return;
  profile_ = active_profile();
  if (profile_) start_ = std::chrono::steady_clock::now();
}

OpTimer::~OpTimer() {
  --t_op_depth;
  if (profile_) profile_->add_op(family_, t_share * seconds_since(start_));
}

ModuleTimer::ModuleTimer(const std::type_info& kind) : kind_(&kind) {
  profile_ = active_profile();
  if (!profile_) return;
  parent_ = t_module_top;
  t_module_top = this;
  start_ = std::chrono::steady_clock::now();
}

ModuleTimer::~ModuleTimer() {
  if (!profile_) return;
  const double total = t_share * seconds_since(start_);
  t_module_top = parent_;
  if (parent_) parent_->children_s_ += total;
  profile_->add_module(kind_name(*kind_), total - children_s_);
}

ConcurrentProfile::ConcurrentProfile() : caller_(active_profile() ? t_module_top : nullptr) {
  if (caller_) start_ = std::chrono::steady_clock::now();
}

ConcurrentProfile::~ConcurrentProfile() {
  if (caller_) caller_->children_s_ += t_share * seconds_since(start_);
}

ConcurrentProfile::Share::Share(int threads) : share_(t_share), top_(t_module_top) {
  t_share = share_ / threads;
  t_module_top = nullptr;
}

ConcurrentProfile::Share::~Share() {
  t_share = share_;
  t_module_top = top_;
}

}  // namespace tidal
