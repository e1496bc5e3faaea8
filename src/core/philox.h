// Philox-4x32-10 counter-based RNG (Salmon et al., SC'11). Every random number in tidal is a
// pure function of (key, counter): parameter init is keyed by (seed, parameter id) with the
// element index as counter, dropout by (seed, layer) with (element, step, micro-batch). So any
// shard of a tensor can generate its own elements alone and get exactly the full tensor's slice.
#pragma once

#include "core/host_device.h"

#include <array>
#include <cmath>
#include <cstdint>

namespace tidal {

using PhiloxCounter = std::array<std::uint32_t, 4>;
using PhiloxKey = std::array<std::uint32_t, 2>;

TIDAL_HOST_DEVICE inline PhiloxCounter philox4x32(PhiloxCounter c, PhiloxKey k) {
  constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = std::uint64_t(kMul0) * c[0];
    const std::uint64_t p1 = std::uint64_t(kMul1) * c[2];
    c = {std::uint32_t(p1 >> 32) ^ c[1] ^ k[0], std::uint32_t(p1), std::uint32_t(p0 >> 32) ^ c[3] ^ k[1],
         std::uint32_t(p0)};
    k[0] += kWeyl0;
    k[1] += kWeyl1;
  }
  return c;
}

// A uniform float in [0, 1) from the top 24 bits.
TIDAL_HOST_DEVICE inline float uniform01(std::uint32_t bits) { return float(bits >> 8) * (1.0f / 16777216.0f); }

// 64-bit FNV-1a: stable ids from names (a parameter's id is the hash of its full name, so it is
// the same in every parallel layout).
inline std::uint64_t fnv1a64(const char* s, std::size_t n) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < n; ++i) {
    h ^= std::uint8_t(s[i]);
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace tidal
