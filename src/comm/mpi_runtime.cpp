#include "comm/mpi_runtime.h"

#include "comm/mpi_communicator.h"
#include "core/error.h"

#include <cstdlib>

namespace tidal::comm {

bool MpiRuntime::launched() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS", "PMI_RANK"}) {
    if (std::getenv(var)) return true;
  }
  return false;
}

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
  TIDAL_CHECK(provided >= MPI_THREAD_SERIALIZED,
              "this MPI library provides thread level {}; tidal needs MPI_THREAD_SERIALIZED (use Open MPI or MPICH)",
              provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank_, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &local_size_);
  MPI_Comm_rank(node, &local_rank_);
  MPI_Comm_free(&node);
  char name[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MPI_Get_processor_name(name, &len);
  processor_.assign(name, std::size_t(len));
  create_mpi_reductions();
  // From here on every MPI call runs on the progress thread.
  progress_ = std::make_unique<MpiProgress>(MPI_COMM_WORLD);
}

MpiRuntime::~MpiRuntime() {
  progress_.reset();
  free_mpi_reductions();
  MPI_Finalize();
}

std::shared_ptr<Communicator> MpiRuntime::world(Seconds timeout) {
  std::vector<int> all(static_cast<std::size_t>(world_size_));
  for (int r = 0; r < world_size_; ++r) all[std::size_t(r)] = r;
  return split("world", {all}, timeout);
}

std::shared_ptr<Communicator> MpiRuntime::split(const std::string& name, const std::vector<std::vector<int>>& partition,
                                                Seconds timeout) {
  int color = -1, key = -1;
  for (std::size_t g = 0; g < partition.size(); ++g) {
    for (std::size_t i = 0; i < partition[g].size(); ++i) {
      if (partition[g][i] == world_rank_) {
        TIDAL_ASSERT(color < 0, "rank {} is in two '{}' groups", world_rank_, name);
        color = int(g);
        key = int(i);
      }
    }
  }
  TIDAL_ASSERT(color >= 0, "rank {} is in no '{}' group", world_rank_, name);
  auto group = std::make_shared<GroupInfo>();
  group->id = next_group_id_++;
  group->name = name;
  group->world_ranks = partition[std::size_t(color)];
  progress_->run([&] {
    MPI_Comm_split(MPI_COMM_WORLD, color, key, &group->comm);
    MPI_Comm_set_errhandler(group->comm, MPI_ERRORS_RETURN);
    progress_->register_group(group);
  });
  return std::make_shared<MpiCommunicator>(*progress_, group, timeout);
}

void MpiRuntime::abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  progress_->run([code] { MPI_Abort(MPI_COMM_WORLD, code); });
  std::abort();
}

}  // namespace tidal::comm
