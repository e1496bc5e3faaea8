// Errors. `Error` is a user or configuration error: its message says what was wrong and how to
// fix it, and the CLI turns it into exit code 2. `InternalError` is a broken invariant: a bug.
// `Diverged` is a run that went numerically wrong (a non-finite loss or gradient): not a bug, not
// bad input the config could have caught; exit code 3 with what went wrong and where.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace tidal {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Diverged : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// Raised when a memory tier cannot satisfy an allocation; says how much was asked and available.
class OutOfMemory : public Error {
 public:
  using Error::Error;
  OutOfMemory(const std::string& what, std::size_t needed) : Error(what), needed_(needed) {}
  // The bytes the tier would have had to hold (0 where unknown).
  std::size_t needed() const { return needed_; }

 private:
  std::size_t needed_ = 0;
};

namespace detail {
[[noreturn]] void throw_internal(const char* file, int line, const char* cond, const std::string& msg);
}  // namespace detail

}  // namespace tidal

// User-facing check: `TIDAL_CHECK(n % h == 0, "model.n_embd ({}) must be divisible by ...", n)`.
#define TIDAL_CHECK(cond, ...)                                 \
  do {                                                         \
    if (!(cond)) throw ::tidal::Error(fmt::format(__VA_ARGS__)); \
  } while (0)

// Invariant check: a failure is a bug in tidal, reported with file and line.
#define TIDAL_ASSERT(cond, ...)                                                              \
  do {                                                                                       \
    if (!(cond)) ::tidal::detail::throw_internal(__FILE__, __LINE__, #cond, fmt::format(__VA_ARGS__)); \
  } while (0)
