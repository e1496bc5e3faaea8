#include "core/process.h"

#include <fstream>
#include <string>

namespace tidal {
namespace {

// A "Key:  1234 kB" line of /proc/self/status, in bytes.
std::uint64_t status_bytes(const std::string& key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.starts_with(key)) return std::stoull(line.substr(key.size())) * 1024;
  return 0;
}

}  // namespace

std::uint64_t resident_bytes() { return status_bytes("VmRSS:"); }
std::uint64_t peak_resident_bytes() { return status_bytes("VmHWM:"); }

}  // namespace tidal
