// Shared state of the multi-rank tests: the process's MPI runtime (made by mpi_main.cpp).
#pragma once

#include "comm/mpi_runtime.h"

namespace tidal::testing {

comm::MpiRuntime& mpi();

}  // namespace tidal::testing
