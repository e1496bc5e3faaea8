#include "core/process.h"

#include <unistd.h>

#include <cstdio>
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

// From /proc/self/statm (its second field, in pages): a few microseconds, cheap enough for every
// step's metrics, where /proc/self/status takes several times that.
std::uint64_t resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int read = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  return read == 2 ? std::uint64_t(resident) * std::uint64_t(::sysconf(_SC_PAGESIZE)) : 0;
}
std::uint64_t peak_resident_bytes() { return status_bytes("VmHWM:"); }

}  // namespace tidal
