// What the operating system says of this process (Linux /proc): resident memory now and at its
// peak. For reports (loading, each step's metrics); 0 where /proc is not there.
#pragma once

#include <cstdint>

namespace tidal {

std::uint64_t resident_bytes();       // VmRSS
std::uint64_t peak_resident_bytes();  // VmHWM

}  // namespace tidal
