#include "engine/launch.h"

#include "config/options.h"
#include "core/error.h"
#if TIDAL_MPI
#include "comm/mpi_runtime.h"
#endif

#include <fmt/format.h>
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

namespace tidal::engine {
#if TIDAL_MPI
namespace {

// Ranks sharing a node share its cores: without OMP_NUM_THREADS, each takes its share.
void share_cores(int ranks_on_node) {
  if (std::getenv("OMP_NUM_THREADS") || ranks_on_node <= 1) return;
  const int cores = int(std::thread::hardware_concurrency());
  omp_set_num_threads(std::max(1, cores / ranks_on_node));
}

}  // namespace
#endif

Launch::Launch([[maybe_unused]] int* argc, [[maybe_unused]] char*** argv) {
#if TIDAL_MPI
  if (comm::MpiRuntime::launched()) {
    mpi_.reset(new comm::MpiRuntime(argc, argv));
    share_cores(mpi_->local_size());
  }
#endif
}

void Launch::FinishMpi::operator()([[maybe_unused]] comm::MpiRuntime* mpi) const {
#if TIDAL_MPI
  delete mpi;
#endif
}

Launch::~Launch() {
  context_.reset();  // its groups before MPI ends
}

int Launch::rank() const {
#if TIDAL_MPI
  if (mpi_) return mpi_->world_rank();
#endif
  return 0;
}

int Launch::world_size() const {
#if TIDAL_MPI
  if (mpi_) return mpi_->world_size();
#endif
  return 1;
}

parallel::ParallelContext& Launch::context(const config::Config& cfg) {
  context_.reset();
  context_ = std::make_unique<parallel::ParallelContext>(config::context_options(cfg), mpi_.get());
  return *context_;
}

int Launch::fail(int code) {
#if TIDAL_MPI
  if (mpi_ && mpi_->world_size() > 1) mpi_->abort(code);
#endif
  return code;
}

int Launch::run(const std::function<void()>& body, const bool* shared) {
  const std::string on_rank = world_size() > 1 ? fmt::format(" on rank {}", rank()) : "";
  try {
    body();
    return 0;
  } catch (const Error& e) {
    std::fflush(stdout);
    if (shared != nullptr && *shared) {
      if (is_main()) fmt::print(stderr, "tidal: error: {}\n", e.what());
      return 2;
    }
    fmt::print(stderr, "tidal: error{}: {}\n", on_rank, e.what());
    return fail(2);
  } catch (const Diverged& e) {
    std::fflush(stdout);
    fmt::print(stderr, "tidal: stopped{}: {}\n", on_rank, e.what());
    return fail(3);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "tidal: internal error{} (a bug; please report it): {}\n", on_rank, e.what());
    return fail(3);
  }
}

}  // namespace tidal::engine
