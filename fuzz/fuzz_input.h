// What every harness shares: the input as a file (the parsers read paths, as users give them),
// and the rule of the harnesses: bad input must end in tidal::Error (what the command turns into
// exit 2 with a message); anything else - a crash, a sanitizer report, another exception (an
// InternalError is a user check that is missing) - is a finding libFuzzer reports.
#pragma once

#include "core/error.h"

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

namespace tidal::fuzz {

// This process's scratch directory, removed when the fuzzer exits.
inline const std::filesystem::path& scratch_dir() {
  struct Scratch {
    std::filesystem::path dir = std::filesystem::temp_directory_path() / ("tidal-fuzz-" + std::to_string(::getpid()));
    Scratch() { std::filesystem::create_directories(dir); }
    ~Scratch() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  };
  static const Scratch scratch;
  return scratch.dir;
}

// A file of this process holding `data` (rewritten for each input).
inline std::string write_input(const std::uint8_t* data, std::size_t size, const std::string& name) {
  const std::string path = (scratch_dir() / name).string();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) __builtin_trap();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) __builtin_trap();
  std::fclose(f);
  return path;
}

// Runs `parse`: a tidal::Error is the expected end of bad input.
template <class Fn>
int expect_clean(Fn&& parse) {
  try {
    parse();
  } catch (const Error&) {
  }
  return 0;
}

}  // namespace tidal::fuzz
