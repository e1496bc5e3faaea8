// Byte counts for people: "512 B", "1.5 MiB" (progress lines, messages, plans).
#pragma once

#include <cstdint>
#include <string>

namespace tidal {

std::string human_bytes(std::uint64_t bytes);

}  // namespace tidal
