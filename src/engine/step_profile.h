// train.profile's report: a step's StepProfile totals as a metrics field and as the lines the
// run prints at the end. Every figure is seconds per step; "outside_ops" is the step time that
// no op family holds (the framework between ops, allocation, hooks).
#pragma once

#include "core/profile.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace tidal::engine {

// The profile of `steps` steps that took `step_seconds` in all, per step:
// {"ops_s": {"gemm": ..., ..., "outside_ops": ...}, "modules_s": {"Linear": ..., ...}}.
nlohmann::json profile_record(const StepProfile::Totals& totals, double step_seconds, double steps);

// Adds `more` into `sum`.
void accumulate_profile(StepProfile::Totals& sum, const StepProfile::Totals& more);

// The summary lines: one per op family and module kind, largest first, with their share of the step.
std::vector<std::string> profile_lines(const nlohmann::json& record);

}  // namespace tidal::engine
