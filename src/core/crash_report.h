// A crash says where it happened: on SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT the process
// writes the signal and its call stack to stderr (frames as `program(+offset)`, which
// `addr2line -f -C -e program offset` turns into function and line on an unstripped build of the
// same commit), then dies of the signal as it would have.
#pragma once

namespace tidal {

void install_crash_report();

}  // namespace tidal
