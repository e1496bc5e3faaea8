// The MPI side of a process: initialisation under mpirun / srun, the world, sub-group creation,
// and abort. Constructed once in main when a launcher started the process (or a test asks for
// it) and passed down; nothing reaches it through a global.
#pragma once

#include "comm/communicator.h"
#include "comm/mpi_progress.h"

#include <memory>
#include <string>
#include <vector>

namespace tidal::comm {

class MpiRuntime {
 public:
  // True when a launcher (mpirun, srun with PMI/PMIx) started this process.
  static bool launched();

  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();  // finishes queued operations, then MPI_Finalize
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  int local_size() const { return local_size_; }  // ranks sharing this node
  int local_rank() const { return local_rank_; }  // this rank's place among them
  std::string processor_name() const { return processor_; }

  // The group of all ranks. `timeout` is its operations' default.
  std::shared_ptr<Communicator> world(Seconds timeout);
  // Collective over the world (every rank passes the same partition of 0..world-1, in the same
  // order of calls): returns this rank's group, ranked in the order its members are listed.
  std::shared_ptr<Communicator> split(const std::string& name, const std::vector<std::vector<int>>& partition,
                                      Seconds timeout);

  // Ends every rank of the job with `code` (after this rank has printed why).
  [[noreturn]] void abort(int code);

 private:
  int world_rank_ = 0, world_size_ = 1, local_size_ = 1, local_rank_ = 0;
  int next_group_id_ = 0;
  std::string processor_;
  std::unique_ptr<MpiProgress> progress_;
};

}  // namespace tidal::comm
