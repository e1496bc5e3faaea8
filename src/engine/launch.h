// A program's process, whatever launched it: one process, or every rank of mpirun / srun
// running the same program. Starts MPI first when a launcher started the process, shares the
// node's cores among its ranks (unless OMP_NUM_THREADS says), builds the parallel context of a
// config's layout, and turns errors into exit codes the way `tidal` does: a user error (a
// tidal::Error: bad config, missing file) prints its message and exits 2; a run that diverged
// (tidal::Diverged) and anything else (a bug) exit 3; under several ranks the failing rank ends the whole job, so none waits forever in
// a collective for it.
//
//   int main(int argc, char** argv) {
//     tidal::engine::Launch launch(&argc, &argv);
//     return launch.run([&] {
//       const auto cfg = tidal::config::load_config("run.toml", {});
//       tidal::engine::Trainer trainer(cfg, launch.context(cfg));
//       trainer.fit();
//     });
//   }
#pragma once

#include "config/config.h"
#include "parallel/context.h"

#include <functional>
#include <memory>

namespace tidal::comm {
class MpiRuntime;
}

namespace tidal::engine {

class Launch {
 public:
  // argc / argv may be null (an embedding interpreter: MPI then starts without them).
  Launch(int* argc = nullptr, char*** argv = nullptr);
  ~Launch();  // finishes MPI
  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;

  int rank() const;
  int world_size() const;
  bool is_main() const { return rank() == 0; }
  // The layout of `cfg` over this launch's ranks (world size = parallel.data x pipeline x
  // tensor x sequence, or a clear error naming the keys). Kept by the launch, which must outlive
  // what uses it; a later call for another config replaces it.
  parallel::ParallelContext& context(const config::Config& cfg);

  // Runs `body`, returning 0, or the exit code of what it threw after printing it to stderr
  // ("tidal: error on rank r: ..."). While `*shared` is true the errors are ones every rank meets
  // alike (arguments, config, layout): rank 0 alone prints, and each rank ends by itself.
  int run(const std::function<void()>& body, const bool* shared = nullptr);
  // Ends this process (and under several ranks, every rank) with `code`.
  int fail(int code);
  // The MPI runtime when a launcher started this process, else null (what the planners take).
  comm::MpiRuntime* mpi() const { return mpi_.get(); }

 private:
  // Deletes the runtime (finishing MPI) where MpiRuntime is a complete type: in a build with MPI.
  struct FinishMpi {
    void operator()(comm::MpiRuntime* mpi) const;
  };
  std::unique_ptr<comm::MpiRuntime, FinishMpi> mpi_;
  std::unique_ptr<parallel::ParallelContext> context_;
};

}  // namespace tidal::engine
