#include "core/crash_report.h"

#include <execinfo.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <initializer_list>

namespace tidal {
namespace {

void write_text(const char* text) {
  const ssize_t ignored = write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

// Async-signal-safe apart from backtrace()'s first call, which may load libgcc (made at install).
void report(int signal) {
  write_text("\ntidal: crashed (a bug; please report it with this output): ");
  write_text(strsignal(signal));
  write_text("; call stack:\n");
  void* frames[64];
  const int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

}  // namespace

void install_crash_report() {
  void* warm[1];
  backtrace(warm, 1);
  for (const int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(s, report);
}

}  // namespace tidal
