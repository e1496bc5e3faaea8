// The tidal command. Thin: parses arguments and calls the engine. User errors (tidal::Error)
// print one line and exit with code 2; internal errors exit with code 3.
#include "core/blas_kernels.h"
#include "core/error.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <omp.h>

#include <cstdio>

namespace {

void print_info() {
  fmt::print("tidal {}\n", TIDAL_VERSION);
  fmt::print("  backends: cpu{}{}\n", TIDAL_CUDA ? ", cuda" : "", TIDAL_MPI ? ", mpi" : "");
  fmt::print("  cpu threads: {} (OMP_NUM_THREADS)\n", omp_get_max_threads());
  fmt::print("  OpenBLAS kernels: {}\n", tidal::blas_kernel_name());
}

}  // namespace

int main(int argc, char** argv) {
  tidal::select_blas_kernels(argv);
  CLI::App app{
      "tidal trains transformer models (GPT, BERT, ViT) on one device or many.\n"
      "Run `tidal <command> --help` for a command's options."};
  app.require_subcommand(1);
  app.footer("Example:\n  tidal info          # what this build supports");
  auto* info = app.add_subcommand("info", "Print the build's backends, threads and BLAS kernels");
  try {
    app.parse(argc, argv);
    if (info->parsed()) print_info();
    return 0;
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  } catch (const tidal::Error& e) {
    fmt::print(stderr, "tidal: error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "tidal: internal error: {}\n", e.what());
    return 3;
  }
}
