// core/profile.h: op families by name, outermost-op charging, module self time, a share of each
// thread's time for modules run at once, and nothing recorded while no profile is active.
#include "core/profile.h"
#include "engine/step_profile.h"
#include "ops/gelu.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <chrono>
#include <thread>

namespace tidal {
namespace {

void busy_for(double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
  }
}

struct Outer {};
struct Inner {};

}  // namespace

static_assert(op_family_of("gemm") == OpFamily::gemm);
static_assert(op_family_of("attention_backward") == OpFamily::attention);
static_assert(op_family_of("ring_attention_forward") == OpFamily::attention);
static_assert(op_family_of("layernorm_forward") == OpFamily::layernorm);
static_assert(op_family_of("gelu_backward") == OpFamily::gelu);
static_assert(op_family_of("rms_norm_backward") == OpFamily::layernorm);
static_assert(op_family_of("swiglu_forward") == OpFamily::gelu);
static_assert(op_family_of("rotary_apply") == OpFamily::elementwise);
static_assert(op_family_of("cross_entropy_forward") == OpFamily::cross_entropy);
static_assert(op_family_of("adamw_step") == OpFamily::optimizer);
static_assert(op_family_of("cast") == OpFamily::copy_cast);
static_assert(op_family_of("bias_add") == OpFamily::elementwise);

TEST(Profile, ANestedOpIsChargedToTheOuterFamily) {
  StepProfile profile;
  {
    const ProfileRecording recording(profile);
    const OpTimer outer(OpFamily::gemm);
    busy_for(0.02);
    {
      const OpTimer inner(OpFamily::gelu);
      busy_for(0.02);
    }
  }
  const StepProfile::Totals t = profile.take();
  EXPECT_GE(t.ops[std::size_t(OpFamily::gemm)], 0.04);
  EXPECT_EQ(t.ops[std::size_t(OpFamily::gelu)], 0.0);
  // take() starts again from zero
  EXPECT_EQ(profile.take().ops[std::size_t(OpFamily::gemm)], 0.0);
}

TEST(Profile, ModulesGetSelfTimeAndARealOpItsFamily) {
  StepProfile profile;
  {
    const ProfileRecording recording(profile);
    const ModuleTimer outer(typeid(Outer));
    busy_for(0.01);
    {
      const ModuleTimer inner(typeid(Inner));
      busy_for(0.03);
      Tensor x = Tensor::zeros({256, 256}), y = Tensor::empty({256, 256});
      ops::gelu_forward(y, x);
    }
  }
  const StepProfile::Totals t = profile.take();
  ASSERT_TRUE(t.modules.count("Outer") && t.modules.count("Inner"));
  EXPECT_GE(t.modules.at("Inner"), 0.03);
  EXPECT_GE(t.modules.at("Outer"), 0.01);
  EXPECT_LT(t.modules.at("Outer"), 0.03);  // its child's 30 ms are not its own
  EXPECT_GT(t.ops[std::size_t(OpFamily::gelu)], 0.0);
}

TEST(Profile, ModulesAtOnceCountAShareOfEachThreadsTime) {
  StepProfile profile;
  {
    const ProfileRecording recording(profile);
    const ModuleTimer outer(typeid(Outer));
    busy_for(0.01);
    const ConcurrentProfile region;
#pragma omp parallel num_threads(2)
    {
      const ConcurrentProfile::Share share(omp_get_num_threads());
      const ModuleTimer inner(typeid(Inner));
      const OpTimer op(OpFamily::gemm);
      busy_for(0.04);
    }
  }
  const StepProfile::Totals t = profile.take();
  ASSERT_TRUE(t.modules.count("Outer") && t.modules.count("Inner"));
  // Two threads' 40 ms each, at once: about 40 ms, not 80.
  EXPECT_GE(t.modules.at("Inner"), 0.04);
  EXPECT_LT(t.modules.at("Inner"), 0.06);
  EXPECT_GE(t.ops[std::size_t(OpFamily::gemm)], 0.04);
  EXPECT_LT(t.ops[std::size_t(OpFamily::gemm)], 0.06);
  EXPECT_LT(t.modules.at("Outer"), 0.03);  // the region is not its own
}

TEST(Profile, NothingIsRecordedWhileNoProfileIsActive) {
  StepProfile profile;
  {
    const OpTimer op(OpFamily::gemm);
    const ModuleTimer m(typeid(Outer));
    busy_for(0.005);
  }
  const StepProfile::Totals t = profile.take();
  EXPECT_EQ(t.ops[std::size_t(OpFamily::gemm)], 0.0);
  EXPECT_TRUE(t.modules.empty());
  EXPECT_EQ(active_profile(), nullptr);
}

TEST(Profile, TheRecordSplitsTheStepAndKeepsTheRestOutsideOps) {
  StepProfile::Totals t;
  t.ops[std::size_t(OpFamily::gemm)] = 0.6;
  t.ops[std::size_t(OpFamily::attention)] = 0.2;
  t.modules["Linear"] = 0.6;
  const nlohmann::json r = engine::profile_record(t, 1.0, 2.0);  // two steps, one second in all
  EXPECT_DOUBLE_EQ(r["step_s"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(r["ops_s"]["gemm"].get<double>(), 0.3);
  EXPECT_DOUBLE_EQ(r["ops_s"]["outside_ops"].get<double>(), 0.1);
  EXPECT_DOUBLE_EQ(r["modules_s"]["Linear"].get<double>(), 0.3);
  const auto lines = engine::profile_lines(r);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[1].find("gemm 300.0 ms (60%)"), std::string::npos) << lines[1];
}

}  // namespace tidal
