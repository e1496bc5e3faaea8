// The tidal command. Thin: reports crashes with their call stack, picks the BLAS kernels, starts
// the launch (MPI under mpirun / srun, before anything else) and runs the subcommand
// (cli/commands.h).
#include "cli/commands.h"
#include "core/blas_kernels.h"
#include "core/crash_report.h"

int main(int argc, char** argv) {
  tidal::install_crash_report();
  tidal::select_blas_kernels(argv);
  tidal::engine::Launch launch(&argc, &argv);
  return tidal::cli::run(argc, argv, launch);
}
