// The tidal command's subcommands (train, sample, tokenize, export, trace, chunk-search, plan,
// info) as a function, so that a program - the `tidal` binary, `python3 -m tidal` - runs them in
// its own process and launch.
#pragma once

#include "engine/launch.h"

namespace tidal::cli {

// Parses argv (argv[0] the program's name) and runs its subcommand on the ranks of `launch`;
// returns the exit code: 0, 2 for a user error, 3 for an internal one.
int run(int argc, char** argv, engine::Launch& launch);

}  // namespace tidal::cli
