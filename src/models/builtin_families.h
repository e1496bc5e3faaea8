// The families tidal is built with, each one folder under models/ (the registry adds them on
// its first use, exactly as a program's register_family does).
#pragma once

#include "models/registry.h"

#include <vector>

namespace tidal::models {

std::vector<Family> builtin_families();

}  // namespace tidal::models
